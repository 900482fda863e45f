#!/usr/bin/env bash
# Installs a built tree into a temporary prefix, then builds the C example of README.md
# against that prefix twice, through CMake's find_package(bufkern) and through pkg-config,
# runs both programs and compares what they print with the values the README shows.
#
#   tests/install/check.sh [BUILD_DIR]      (default: build)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "install check: $*" >&2; exit 1; }

prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null

# The example is the README's own code block, and the values it must print are the ones
# its comment shows, so the check fails when either drifts from the library.
awk '/^## Using the library from C/ { section = 1 }
     section && /^```c$/ { inside = 1; next }
     inside && /^```$/ { exit }
     inside' "$root/README.md" >"$work/example.c"
expected=$(sed -n 's|.*/\* *\(-\{0,1\}[0-9][-0-9. ]*[0-9]\) *\*/.*|\1|p' "$work/example.c")
[ -n "$expected" ] || fail "no C example with its expected output in README.md"

check_output() {
  local how=$1 program=$2 got
  got=$("$program") || fail "$how: the example exited with status $?"
  [ "$got" = "$expected" ] || fail "$how: printed '$got', README.md shows '$expected'"
  echo "install check: $how: $got (as README.md shows)"
}

cmake -S "$root/tests/install" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DBK_EXAMPLE="$work/example.c" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
check_output "find_package(bufkern)" "$work/cmake-build/example"

pc=$(find "$prefix" -name bufkern.pc -print -quit)
[ -n "$pc" ] || fail "no bufkern.pc under the prefix"
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(pkg-config --variable=libdir bufkern)
# shellcheck disable=SC2046  # pkg-config prints several flags
cc -std=c11 -Wall -Wextra -Werror "$work/example.c" -o "$work/example-pc" \
  $(pkg-config --cflags --libs bufkern) -Wl,-rpath,"$libdir"
check_output "pkg-config bufkern" "$work/example-pc"

for program in "$work/cmake-build/example" "$work/example-pc"; do
  case $(ldd "$program" | grep libbufkern) in
    *"$prefix"*) ;;
    *) fail "$program does not load the installed library: $(ldd "$program" | grep libbufkern)" ;;
  esac
done
