#!/usr/bin/env bash
# Companion of scripts/gpu-check.sh, run on a normal Debian bookworm machine with apt: downloads the
# exact .debs of dtrun's build dependencies other than LibTorch (gRPC, protobuf, Abseil, spdlog,
# fmt, CLI11, nlohmann-json, GoogleTest, TurboJPEG and libjpeg-turbo, stb, libmicrohttpd's header, xxHash) with their library dependencies, into
# .gpu-kit/debs (ignored by git; well under the 64 MiB a GPU machine's working tree may carry).
#   scripts/gpu-kit-fetch.sh [--list]   # --list: print the resolved package list, download nothing
# The base system any build machine has (libc, libstdc++, zlib, OpenSSL, systemd's libraries) and
# what only packaging needs are left out; gpu-check.sh unpacks the rest into a local prefix.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOTS="libabsl-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libturbojpeg0-dev libjpeg62-turbo-dev libstb-dev libmicrohttpd-dev libxxhash-dev"
BASE='^(libc6|libc6-dev|libgcc-s1|libstdc\+\+6|libstdc\+\+-.*-dev|zlib1g|zlib1g-dev|libssl3|libssl-dev|libsystemd0|libzstd1|liblzma5|liblz4-1|libgcrypt20|libgpg-error0|libcap2|libcrypt1|libcrypt-dev|libnsl2|libnsl-dev|libtirpc.*|libkrb5.*|libk5crypto3|libkeyutils1|libcom-err2|libgssapi-krb5-2|libselinux1|libpcre2-8-0|debconf|dpkg|perl.*|pkgconf.*|pkg-config|libpkgconf3|catch2|googletest|linux-libc-dev|gcc-.*-base|libgcc-.*-dev|libc-dev-bin|rpcsvc-proto|libudev1)$'
list=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
         --no-enhances $ROOTS | grep -v '^ ' | grep -v '^<' | sort -u | grep -Ev "$BASE")
if [ "${1:-}" = --list ]; then echo $list; exit 0; fi
dir=.gpu-kit/debs
rm -rf "$dir" && mkdir -p "$dir"
# As root apt would drop to its _apt user, which cannot write into this checkout.
sandbox=(); [ "$(id -u)" = 0 ] && sandbox=(-o APT::Sandbox::User=root)
(cd "$dir" && apt-get "${sandbox[@]}" download -qq $list)
total=$(du -sm "$dir" | cut -f1)
echo "gpu-kit: $(ls "$dir" | wc -l) packages, ${total} MiB in $dir"
[ "$total" -lt 56 ] || { echo "gpu-kit: $dir is ${total} MiB; the GPU machine's tree carries 64 MiB at most" >&2; exit 1; }
