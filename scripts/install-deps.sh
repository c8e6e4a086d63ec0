#!/usr/bin/env bash
# Installs every build and test dependency from Debian's archive (bookworm). Idempotent.
set -euo pipefail
PKGS="build-essential cmake ninja-build pkg-config ccache git iproute2 procps
  libabsl-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libtorch-dev libgloo-dev libturbojpeg0-dev python3-torch python3-torchvision"
missing=$(dpkg-query -W -f='${Package} ${Status}\n' $PKGS 2>/dev/null | grep -v 'install ok installed' | cut -d' ' -f1 || true)
for p in $PKGS; do dpkg-query -W "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$(echo $missing)" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
