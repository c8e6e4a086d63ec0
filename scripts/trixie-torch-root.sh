#!/usr/bin/env bash
# A Debian trixie root holding PyTorch 2.6 for Python (python3-torch), for tests that run real 2.x
# clients against dtrun (tests/integration/torch2x_store_test.cc). Made once per build directory,
# at BUILD_DIR/package-test/trixie-torch, and reused; prints its path. Tests only read it (they
# chroot into it from a private mount namespace, so no mount outlives them).
#   scripts/trixie-torch-root.sh BUILD_DIR      (root; debootstrap; Debian's archive reachable)
# The first call (debootstrap of trixie's minbase, then python3-torch and its libraries) prints
# how long it took.
# Exit 77: cannot run here (not root, or no debootstrap), said on one line.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "trixie-torch-root: skipped: needs root (debootstrap, chroot)"; exit 77; }
command -v debootstrap >/dev/null || { echo "trixie-torch-root: skipped: no debootstrap (scripts/install-deps.sh package)"; exit 77; }
cache=$(realpath "$1")/package-test
root=$cache/trixie-torch
mkdir -p "$cache"
exec 9>"$cache/.trixie-lock"
flock 9
if [ ! -e "$root/.complete" ]; then
  start=$SECONDS
  rm -rf "$root"
  log=$cache/trixie-torch.log
  mirror=$(grep -rhoE '(URIs:|deb) +[a-z]+://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
    head -1 | awk '{print $2}' || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  debootstrap --variant=minbase trixie "$root" "$mirror" >"$log" 2>&1 || { tail -5 "$log" >&2; exit 1; }
  printf '127.0.0.1 localhost\n::1 localhost ip6-localhost\n' > "$root/etc/hosts"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  chroot "$root" apt-get update -qq >>"$log" 2>&1
  DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -qq --no-install-recommends python3-torch \
    >>"$log" 2>&1 || { tail -5 "$log" >&2; exit 1; }
  chroot "$root" apt-get clean
  touch "$root/.complete"
  echo "trixie-torch-root: made $root in $((SECONDS - start)) s" >&2
fi
echo "$root"
