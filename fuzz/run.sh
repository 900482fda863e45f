#!/usr/bin/env bash
# Builds the front-door fuzzer with clang (libFuzzer, AddressSanitizer,
# UndefinedBehaviorSanitizer) over the core, the front door and the CPU
# backend, then runs it for FUZZ_SECONDS (default 60) from the seed corpus.
# Usage: fuzz/run.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-${FUZZ_SECONDS:-60}}
out=build-fuzz
mkdir -p "$out/corpus"
dl=$(dirname "$(dirname "$(find /usr/include -name dlpack.h -path '*dlpack/dlpack.h' | head -n 1)")")
clang -std=c11 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -fno-omit-frame-pointer -Iinclude -Isrc -I"$dl" \
  src/core/*.c src/ops/*.c src/cpu/*.c fuzz/fuzz_frontdoor.c -lm -lpthread -o "$out/fuzz_frontdoor"
ASAN_OPTIONS=allocator_may_return_null=1 "$out/fuzz_frontdoor" -max_total_time="$secs" -rss_limit_mb=4096 -timeout=20 \
  -print_final_stats=1 "$out/corpus" fuzz/corpus 2>&1 | tail -n 25
