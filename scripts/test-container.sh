#!/usr/bin/env bash
# Builds examples/container/Containerfile from the package this build makes, on a clean bookworm
# base (scripts/bookworm-base.sh imported as an image: no registry needed), then runs a 2-process
# training and a Python import in a stage built on that image.
#   scripts/test-container.sh [BUILD_DIR]      (root; podman; Debian's archive reachable)
# The stages run with podman's chroot isolation: this machine's sandbox refuses the OCI runtime's
# rlimits (`podman run` fails there), a cluster's nodes run the image with `podman run`/Kubernetes.
# Exit 77: cannot run here (not root, no podman, or too little disk), said on one line.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
[ "$(id -u)" = 0 ] || { echo "test-container: skipped: needs root"; exit 77; }
command -v podman >/dev/null || { echo "test-container: skipped: no podman (scripts/install-deps.sh package)"; exit 77; }
command -v debootstrap >/dev/null || { echo "test-container: skipped: no debootstrap (scripts/install-deps.sh package)"; exit 77; }
# podman itself unusable here (no storage driver, no user namespaces): a machine's limit, not the recipe's.
if ! why=$(podman info 2>&1 >/dev/null); then
  echo "test-container: skipped: podman cannot run on this machine: $(echo "$why" | head -1)"; exit 77
fi

# Measured peak on one disk: ~4.2 GiB (the container's files, the layer committed from them, and
# that layer's copy in podman's copy directory).
read -r store copies < <(podman info --format '{{.Store.GraphRoot}} {{.Store.ImageCopyTmpDir}}')
scripts/disk-room.sh test-container "$store:3000" "$copies:1500" "$build:300" || exit $?

mkdir -p "$build/package-test"
work=$(mktemp -d "$build/package-test/container.XXXXXX")
tag=$(basename "$work" | tr 'A-Z.' 'a-z-')
base_image=localhost/dtrun-base:$tag image=localhost/dtrun-train:$tag check=localhost/dtrun-check:$tag
cleanup() {
  podman rmi -f "$check" "$image" "$base_image" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
step() { printf 'test-container: %s (%ds)\n' "$1" "$SECONDS"; }
build_opts=(--cgroup-manager=cgroupfs --isolation=chroot --network=host)

step "the package, and the clean bookworm base as an image"
cpack -G DEB -B "$work/cpack" --config "$build/CPackConfig.cmake" >/dev/null
mkdir "$work/ctx"
cp "$work"/cpack/*.deb examples/container/Containerfile "$work/ctx/"
podman import -q "$(scripts/bookworm-base.sh "$build")" "$base_image" >/dev/null

step "podman build examples/container (C++ trainers only: EXTRA_PACKAGES=\"\")"
# The host's apt cache spares downloads; the image's own lists decide what installs.
podman build "${build_opts[@]}" -q -v /var/cache/apt/archives:/var/cache/apt/archives \
  --build-arg BASE="$base_image" --build-arg EXTRA_PACKAGES= -t "$image" "$work/ctx" >/dev/null

step "a 2-process job and the Python module in the image"
mkdir "$work/check"
cat > "$work/check/Containerfile" <<CHECK
FROM $image
RUN dtdata make-demo /tmp/d --classes 4 --train-per-class 16 --val-per-class 4 --size 32 >/dev/null \
 && dtrun --standalone --nproc-per-node 2 train_imagenet /tmp/d --epochs 1 -b 8 --image-size 32 -j 1 \
      --lr 0.02 --output-dir /tmp/run > /tmp/train.log 2>&1; rc=\$?; tail -3 /tmp/train.log; [ \$rc = 0 ] \
 && grep -q 'best val top1' /tmp/train.log \
 && python3 -c 'import dtrun; print("python3 imports", dtrun.__file__)'
CHECK
podman build "${build_opts[@]}" -t "$check" "$work/check" 2>&1 | grep -E 'top1|imports|rror' || true
podman image exists "$check" || { echo "test-container: FAILED: the job in the image failed"; exit 1; }
step "passed"
