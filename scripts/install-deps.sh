#!/usr/bin/env bash
# Installs every build and test dependency from Debian's archive (bookworm). Idempotent.
set -euo pipefail
PKGS="build-essential cmake ninja-build pkg-config ccache git iproute2 procps
  libabsl-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libtorch-dev libgloo-dev libxxhash-dev libturbojpeg0-dev libstb-dev python3-torch python3-torchvision python3-tqdm python3-matplotlib openssl libssl-dev
  clang libclang-rt-dev
  nftables elfutils gdb strace libmicrohttpd-dev slurm-wlm munge"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$(echo $missing)" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
