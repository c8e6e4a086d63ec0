#!/usr/bin/env bash
# A clean Debian bookworm root (debootstrap --variant=minbase) as a tar file, made once per build
# directory and reused: the base of the package test (test-deb.sh) and the container test
# (test-container.sh). Prints the tarball's path.
#   scripts/bookworm-base.sh BUILD_DIR        (root; debootstrap; Debian's archive reachable)
set -euo pipefail
cache=$(realpath "$1")/package-test
mkdir -p "$cache"
# Not compressed: gzip took ~8 s of CPU to make it and ~1 s to read it back, for 200 MB of disk.
base=$cache/bookworm-minbase.tar
exec 9>"$cache/.lock"
flock 9  # the two tests may run side by side under ctest -j
if [ ! -s "$base" ]; then
  tmp=$(mktemp -d "$cache/debootstrap.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "bookworm-base: debootstrap --variant=minbase bookworm (once; kept as $base)" >&2
  debootstrap --variant=minbase bookworm "$tmp/root" http://deb.debian.org/debian >"$tmp/log" 2>&1 ||
    { tail -5 "$tmp/log" >&2; exit 1; }
  # An installed Debian names localhost in /etc/hosts; minbase does not.
  printf '127.0.0.1 localhost\n::1 localhost ip6-localhost\n' > "$tmp/root/etc/hosts"
  tar -C "$tmp/root" -cf "$base.tmp" . && mv "$base.tmp" "$base"
fi
echo "$base"
