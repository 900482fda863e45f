#!/usr/bin/env bash
# Installs the system packages bufkern builds against when they are missing:
# a C compiler, CMake, pkg-config, OpenBLAS and DLPack's header. Uses apt-get
# (as root, or through sudo when available). Safe to run repeatedly.
set -euo pipefail
need=()
for pkg in build-essential cmake pkg-config libopenblas-dev libdlpack-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: missing ${need[*]} and no apt-get; install them by hand" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo=sudo; else
    echo "install-deps: need root to install ${need[*]}" >&2
    exit 1
  fi
fi
echo "install-deps: installing ${need[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
