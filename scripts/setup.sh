#!/usr/bin/env bash
# Sets up a machine for dtc and builds it into build/.
#
# Installs the Debian and PyPI packages the build and tests need when they
# are missing (idempotent; silent when everything is there), configures
# CMake with Ninja, ccache and clang 19 once, and builds.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

apt_packages=(
  cmake ninja-build ccache git
  clang-19 libclang-rt-19-dev
  llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools
  protobuf-compiler libprotobuf-dev libfmt-dev libgtest-dev
  zlib1g-dev libzstd-dev
  libopenblas-dev
  libdnnl-dev
  libopenmpi-dev openmpi-bin
  coinor-libcbc-dev
  python3 python3-pip
  chromium-headless-shell
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi

python=${PYTHON:-python3}
if ! "$python" - "$root/tests/requirements.txt" <<'PY' 2>/dev/null
import sys, importlib.metadata as md
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, _, version = line.partition("==")
    installed = md.version(name)
    if version and installed != version:
        raise SystemExit(1)
PY
then
  echo "setup: installing Python packages from tests/requirements.txt"
  "$python" -m pip install -q --disable-pip-version-check -r "$root/tests/requirements.txt" 2>&1 \
    | grep -v "Running pip as the 'root' user" || true
fi

build="$root/build"
if [ ! -f "$build/build.ninja" ]; then
  CC=clang-19 CXX=clang++-19 cmake -G Ninja -S "$root" -B "$build" \
    -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v "$python")" > "$build.cmake.log" 2>&1 \
    || { cat "$build.cmake.log"; exit 1; }
  rm -f "$build.cmake.log"
fi
ninja -C "$build" | grep -vE '^\[[0-9]+/[0-9]+\] ' || true
test "${PIPESTATUS[0]}" -eq 0
