#!/usr/bin/env bash
# Before a GPU session: compiles and links what scripts/gpu-check.sh builds (GPU_BUILD_TARGETS,
# scripts/gpu-kit-env.sh) against a CUDA build of LibTorch, here, without a GPU, so that code only
# a CUDA build compiles (DTRUN_WITH_NCCL, DTRUN_WITH_CUDNN, DTRUN_WITH_NVJPEG) cannot cost a GPU
# session's one run. Uses shared/tools/trixie-chroot with TRIXIE_CUDA=1: Debian trixie's CUDA
# LibTorch 2.6, CUDA 12.4, NCCL and nvJPEG; cuDNN's headers come from this machine's own CUDA
# install (Debian's nvidia-cudnn package downloads them from NVIDIA, which cannot work offline).
# Needs root. The first call sets the chroot up (~5 min) and builds cold (~20 min on 2 cores);
# later calls build what changed. Nothing runs: a CUDA program needs a GPU.
#   scripts/cuda-compile-check.sh [EXTRA_TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
tool=${TRIXIE_CHROOT:-$(realpath -m ../shared/tools/trixie-chroot)}
root=${TRIXIE_ROOT:-/var/tmp/trixie-cuda-root}
[ "$(id -u)" = 0 ] || { echo "cuda-compile-check: needs root (a chroot)" >&2; exit 1; }
[ -x "$tool" ] || { echo "cuda-compile-check: no $tool; set TRIXIE_CHROOT to the trixie-chroot tool" >&2; exit 1; }
source scripts/gpu-kit-env.sh
export TRIXIE_CUDA=1 TRIXIE_ROOT=$root
[ -e "$root/usr/lib/x86_64-linux-gnu/cmake/Torch/TorchConfig.cmake" ] || "$tool" setup
# Build dependencies the shared tool's package list does not have (it predates them).
extra="libxxhash-dev libmicrohttpd-dev libssl-dev zlib1g-dev libjpeg62-turbo-dev"
if ! chroot "$root" dpkg -s $extra >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -qq --no-install-recommends $extra >/dev/null
fi
if [ ! -e "$root/usr/include/cudnn.h" ]; then
  header=$(ls /usr/local/cuda*/include/cudnn.h /usr/include/cudnn.h 2>/dev/null | head -1 || true)
  if [ -n "$header" ]; then
    cp "$(dirname "$header")"/cudnn*.h "$root/usr/include/"
  else
    echo "cuda-compile-check: no cudnn.h on this machine; --cudnn-bn-relu's cuDNN code is left out" >&2
  fi
fi
# Release, no unity batches, warnings not errors: as gpu-check.sh builds (GCC 14's false
# positives inside LibTorch's headers would fail a -Werror build).
targets=("${GPU_BUILD_TARGETS[@]}" "$@")
"$tool" run sh -c 'cmake -S /src -B /build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRUN_UNITY_BUILD=OFF \
    -DTORCH_CUDA_ARCH_LIST=9.0 -DCUDNN_INCLUDE_DIR=/usr/include -DNVJPEG_INCLUDE_DIR=/usr/include >/dev/null &&
  cmake --build /build-cuda -j"$(nproc)" --target "$@"' sh "${targets[@]}"
built=$(grep -oE 'DTRUN_WITH_(NCCL|CUDNN|NVJPEG)=1' "$root/build-cuda/build.ninja" | sort -u | tr '\n' ' ')
echo "cuda-compile-check: ${targets[*]} compiled and linked against CUDA LibTorch; paths built: ${built:-none}"
