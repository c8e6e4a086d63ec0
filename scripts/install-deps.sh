#!/usr/bin/env bash
# Installs build and test dependencies from Debian's archive (bookworm). Idempotent.
#   scripts/install-deps.sh          everything: the whole test suite's needs
#   scripts/install-deps.sh main     only what the main job builds and runs (scripts/run-main-job.sh)
#   scripts/install-deps.sh package  the main job's and what the Debian package needs (scripts/build-deb.sh)
set -euo pipefail
# What building dtrun, dtdata, train_imagenet and dtplot needs (GoogleTest too: configuring the
# tree looks for it), and matplotlib for dtplot's pictures.
# OpenBLAS: libtorch only recommends an optimised BLAS, which --no-install-recommends leaves out;
# netlib's reference BLAS makes train_recsys's MLP ~3x slower (OpenMP build, as LibTorch's threads).
MAIN_PKGS="build-essential cmake ninja-build pkg-config ccache
  libabsl-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libtorch-dev libgloo-dev libxxhash-dev libturbojpeg0-dev libjpeg62-turbo-dev libstb-dev python3-matplotlib openssl libssl-dev
  libmicrohttpd-dev libopenblas0-openmp"
# The rest of the suite: Python workers, namespaces, sanitizers and fuzzers, stacks, Slurm; netlib's
# BLAS for the test that train_recsys names it; clang's OpenMP, which LibTorch's CMake files ask of
# clang (the TSan build of the worker library).
TEST_PKGS="git iproute2 procps python3-torch python3-torchvision python3-tqdm python3-rich
  clang libclang-rt-dev libomp-dev libblas3
  nftables elfutils gdb strace slurm-wlm munge"
# Making the Debian package and testing it in a clean root and a container image (scripts/build-deb.sh,
# test-deb.sh, test-container.sh).
PACKAGE_PKGS="dpkg-dev help2man lintian debootstrap zsh podman"
case "${1:-}" in
  main) PKGS="$MAIN_PKGS" ;;
  package) PKGS="$MAIN_PKGS $PACKAGE_PKGS" ;;
  *) PKGS="$MAIN_PKGS $TEST_PKGS $PACKAGE_PKGS" ;;
esac
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$(echo $missing)" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
