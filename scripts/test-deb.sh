#!/usr/bin/env bash
# Installs the Debian packages into a clean Debian bookworm root that has only what they declare,
# and runs jobs there as a user would. First `dtrun` alone (it must not bring LibTorch): a Python
# job importing the packaged module, a 2-node job (the gRPC module), completion, man page. Then
# `dtrun-trainers`: a 2-process training with the packaged trainer on a dtdata dataset.
#   scripts/test-deb.sh [BUILD_DIR]     (root; debootstrap; Debian's archive reachable)
# The package is made from BUILD_DIR (default build/) with CPack into a scratch directory; the clean
# root comes from scripts/bookworm-base.sh (debootstrap, once per build directory).
# Exit 77: cannot run here (not root, no debootstrap, or too little disk), said on one line.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
[ "$(id -u)" = 0 ] || { echo "test-deb: skipped: needs root (chroot and mounts)"; exit 77; }
command -v debootstrap >/dev/null || { echo "test-deb: skipped: no debootstrap (scripts/install-deps.sh package)"; exit 77; }
[ -s "$build/package/man/dtrun.1.gz" ] || { echo "test-deb: skipped: no man pages in $build (help2man missing? scripts/install-deps.sh package)"; exit 77; }

# Measured peak: ~1.3 GiB (the clean root with the trainers' 411 packages).
scripts/disk-room.sh test-deb "$build:1800" || exit $?

cache=$build/package-test
mkdir -p "$cache"
work=$(mktemp -d "$cache/run.XXXXXX")
trap 'rm -rf "$work"' EXIT
step() { printf 'test-deb: %s (%ds)\n' "$1" "$SECONDS"; }

step "making the package from $build"
cpack -G DEB -B "$work/cpack" --config "$build/CPackConfig.cmake" >/dev/null
deb=$(basename "$work"/cpack/dtrun_*.deb)
trainers=$(basename "$work"/cpack/dtrun-trainers_*.deb)

base=$(scripts/bookworm-base.sh "$build")
root=$work/root
mkdir "$root"
tar -C "$root" -xf "$base"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The host's Debian sources (bookworm with its updates and security, as on a cluster's nodes): the
# package's versioned dependencies come from this host's libraries.
if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
  rm -f "$root/etc/apt/sources.list"
  cp /etc/apt/sources.list.d/*.sources "$root/etc/apt/sources.list.d/"
fi
cp "$work/cpack/$deb" "$work/cpack/$trainers" "$root/tmp/"
cp tests/package/in_root.sh "$root/tmp/in_root.sh"

step "apt install ./$deb, then ./$trainers (no recommends), each with its jobs, in the clean root"
# A private mount namespace: /proc and /dev mounted for the root vanish with it. The host's apt
# cache is lent read-only-in-spirit to spare downloads; the root's own lists decide what installs.
unshare --mount --propagation private -- sh -euc '
  root=$1 deb=$2 trainers=$3
  install() { DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount --bind /var/cache/apt/archives "$root/var/cache/apt/archives"
  chroot "$root" apt-get update -qq
  install "/tmp/$deb"
  chroot "$root" sh /tmp/in_root.sh launcher
  install "/tmp/$trainers"
  chroot "$root" sh /tmp/in_root.sh trainers
' sh "$root" "$deb" "$trainers"
step "passed"
