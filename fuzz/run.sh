#!/usr/bin/env bash
# Builds the front-door fuzzer with clang (libFuzzer, AddressSanitizer,
# UndefinedBehaviorSanitizer) over the core, the front door and the CPU
# backend, then fuzzes for a bounded time.
#
# Usage:
#   fuzz/run.sh [seconds]         bounded run from the committed corpus (CI;
#                                 default FUZZ_SECONDS or 60); new inputs go
#                                 to build-fuzz/corpus, fuzz/corpus is not
#                                 written
#   fuzz/run.sh --grow [seconds]  the same run, then the inputs that add
#                                 coverage are merged into fuzz/corpus
#                                 (libFuzzer -merge=1)
#   fuzz/run.sh --repro           runs each input of fuzz/repro (minimised
#                                 reproducers of front-door defects) once and
#                                 reports which still fail
# Environment:
#   BK_FUZZ_SKIP_KNOWN=1  build with -DBK_FUZZ_SKIP_KNOWN: the harness avoids
#                         the argument patterns of known front-door defects
#   BK_FUZZ_BLAS=1        link OpenBLAS (products take the BLAS path, cut into
#                         small chunks) instead of the blocked loops
#   FUZZ_JOBS=N           N fuzzing processes (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
grow=0
repro=0
if [[ "${1:-}" == "--grow" ]]; then
  grow=1
  shift
elif [[ "${1:-}" == "--repro" ]]; then
  repro=1
  shift
fi
secs=${1:-${FUZZ_SECONDS:-60}}
jobs=${FUZZ_JOBS:-1}
par=()
if [[ $jobs -gt 1 ]]; then
  par=(-jobs="$jobs" -workers="$jobs")
fi
defs=()
libs=()
out=build-fuzz
if [[ "${BK_FUZZ_SKIP_KNOWN:-0}" == 1 ]]; then
  defs+=(-DBK_FUZZ_SKIP_KNOWN)
  out=$out-skip
fi
if [[ "${BK_FUZZ_BLAS:-0}" == 1 ]]; then
  # A chunk of 37 makes products above 37 in m, n or p take several BLAS calls.
  defs+=(-DBK_HAVE_OPENBLAS -DBK_CPU_BLAS_CHUNK=37 -I/usr/include/x86_64-linux-gnu/openblas-pthread)
  libs+=(-lopenblas)
  out=$out-blas
fi
mkdir -p "$out/corpus"
dl=$(dirname "$(dirname "$(find /usr/include -name dlpack.h -path '*dlpack/dlpack.h' | head -n 1)")")
clang -std=c11 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -fno-omit-frame-pointer -Wall -Wextra -Iinclude -Isrc -I"$dl" "${defs[@]}" \
  src/core/*.c src/ops/*.c src/cpu/*.c fuzz/fuzz_frontdoor.c "${libs[@]}" -lm -lpthread \
  -o "$out/fuzz_frontdoor"
export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1
export OPENBLAS_NUM_THREADS=1
if [[ $repro == 1 ]]; then
  failed=0
  for f in fuzz/repro/*.bin; do
    if "$out/fuzz_frontdoor" "$f" >"$out/repro.log" 2>&1; then
      echo "passes: $f"
    else
      failed=1
      echo "FAILS:  $f: $(grep -m1 -E 'invariant failed|runtime error|ERROR' "$out/repro.log")"
    fi
  done
  exit $failed
fi
"$out/fuzz_frontdoor" -max_total_time="$secs" -rss_limit_mb=4096 -timeout=20 -max_len=4096 \
  -dict=fuzz/frontdoor.dict -print_final_stats=1 "${par[@]}" \
  -artifact_prefix="$out/" "$out/corpus" fuzz/corpus 2>&1 | tail -n 25
if [[ $grow == 1 ]]; then
  "$out/fuzz_frontdoor" -merge=1 -max_len=4096 fuzz/corpus "$out/corpus" 2>&1 | tail -n 3
  du -sh fuzz/corpus
fi
