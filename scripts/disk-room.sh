#!/usr/bin/env bash
# Whether the disks have room for what a test writes at its peak; if not, exit 77 (a skip) with
# one line that names the disk, what is free and what is needed. A full disk is this machine's
# limit, not a defect of what the test checks, and a half-written image says nothing.
#   scripts/disk-room.sh NAME DIR:MIB [DIR:MIB ...]
# Needs of directories on one filesystem add up (podman's storage and its copy directory are
# often one disk).
set -euo pipefail
name=$1
shift
declare -A need free dirs
for arg in "$@"; do
  dir=${arg%:*} mib=${arg##*:}
  while [ ! -d "$dir" ]; do dir=$(dirname "$dir"); done  # not made yet: its parent's disk
  read -r mount avail < <(df -P -B1M "$dir" | awk 'NR == 2 {print $6, $4}')
  need[$mount]=$((${need[$mount]:-0} + mib))
  free[$mount]=$avail
  dirs[$mount]="${dirs[$mount]:+${dirs[$mount]} and }${arg%:*}"
done
for mount in "${!need[@]}"; do
  if ((free[$mount] < need[$mount])); then
    echo "$name: skipped: ${free[$mount]} MiB free on $mount (${dirs[$mount]}), about ${need[$mount]} MiB needed" \
      "at the peak: free some space there, or point those directories at a larger disk"
    exit 77
  fi
done
