#!/usr/bin/env bash
# tools/setup.sh — installs what tessel needs on a fresh Debian 12 machine, idempotently and quietly.
# Safe to run many times: it only calls apt when a package is missing.
set -euo pipefail
PKGS=(bazel-bootstrap libabsl-dev libeigen3-dev pybind11-dev python3-dev libgtest-dev libgmock-dev
      libbenchmark-dev python3-numpy python3-pytest python3-pip libgloo-dev g++ nlohmann-json3-dev libxxhash-dev
      libopenblas-pthread-dev libdnnl-dev libtomlplusplus-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Bazel disk cache at an absolute path in $HOME so a fresh clone (CI) reuses compiled objects.
ws="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${HOME:-/root}/.cache/tessel/bazel-disk"
mkdir -p "$cache"
echo "build --disk_cache=$cache" > "$ws/.bazelrc.user"
# Python packages that only tests use (checkpoint/testing/safetensors_interop_test.py reads tessel
# checkpoints with the official safetensors and xxhash wheels), pinned, from PyPI, into a private
# directory: nothing is installed into the system Python.
pydeps="${HOME:-/root}/.cache/tessel/pydeps"
if ! [ -d "$pydeps/safetensors" ] || ! [ -d "$pydeps/xxhash" ]; then
  echo "setup: installing safetensors, xxhash (test-only) into $pydeps" >&2
  /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --target "$pydeps" safetensors==0.4.5 xxhash==3.5.0
fi
echo "test --test_env=TESSEL_PYDEPS=$pydeps" >> "$ws/.bazelrc.user"
