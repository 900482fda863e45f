#!/usr/bin/env bash
# fft_callbacks.sh — builds and runs the cuFFT LTO callback probe
# (dev/cuda/fft_callbacks.cu) on a CUDA 13 machine with an sm_90 GPU.
#
#   bash dev/cuda/fft_callbacks.sh              build, then run every route
#   bash dev/cuda/fft_callbacks.sh --build-only build only (no GPU needed)
#
# Build outputs go to $BK_FFT_CB_DIR (default /tmp/bk_fft_callbacks), never
# into the repository. Each route runs in its own process under a time
# limit, so a route that fails, crashes or hangs does not stop the others.
# The first route whose four callback plans all work then runs the timing
# and bitwise check at the large shapes. Everything takes well under 3
# minutes; the remaining time is given to the timing run.
set -u
cd "$(dirname "$0")/../.."
SRC=dev/cuda/fft_callbacks.cu
B=${BK_FFT_CB_DIR:-/tmp/bk_fft_callbacks}
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC=$CUDA/bin/nvcc
[ -x "$NVCC" ] || NVCC=nvcc
START=$(date +%s)
BUDGET=170   # seconds for the whole script
mkdir -p "$B"
log() { printf '%s\n' "$*"; }
elapsed() { echo $(( $(date +%s) - START )); }

# step NAME CMD...: run one build step, log it and its result; never exits.
step() {
  local name=$1; shift
  local t0=$(date +%s%N)
  if "$@" > "$B/$name.log" 2>&1; then
    log "  ok   $name ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
    return 0
  fi
  log "  FAIL $name: $*"
  sed 's/^/       /' "$B/$name.log" | head -30
  return 1
}

log "== build ($B) =="
log "  $("$NVCC" --version | tail -1)"
RPATH="-Xlinker -rpath -Xlinker $CUDA/lib64"
step probe "$NVCC" -O2 -std=c++17 -arch=sm_90 $RPATH -o "$B/fft_callbacks" "$SRC" \
  -lcufft -lnvrtc -lnvJitLink -ldl || { log "the probe did not build: stopping"; exit 1; }
# The same probe linking only cuFFT: cuFFT has to find NVRTC and nvJitLink itself.
step probe_minimal "$NVCC" -O2 -std=c++17 -arch=sm_90 -DBK_MINIMAL $RPATH \
  -o "$B/fft_callbacks_minimal" "$SRC" -lcufft -ldl
step emit_cxx sh -c "'$B/fft_callbacks' emit cxx > '$B/cb_cxx.cu'"
step emit_c sh -c "'$B/fft_callbacks' emit c > '$B/cb_c.cu'"
# LTO-IR in a fatbin, for compute_90 (lto_90), callbacks with C++ linkage and extern "C".
step fatbin_cxx "$NVCC" -gencode arch=compute_90,code=lto_90 -dc -fatbin "$B/cb_cxx.cu" \
  -o "$B/cb_cxx.fatbin"
step fatbin_c "$NVCC" -gencode arch=compute_90,code=lto_90 -dc -fatbin "$B/cb_c.cu" \
  -o "$B/cb_c.fatbin"
# A host object with the LTO-IR fatbin embedded (nvcc -dlto -dc).
step dlto_obj_cxx "$NVCC" -arch=sm_90 -dlto -dc "$B/cb_cxx.cu" -o "$B/cb_cxx.o"
log "  build done in $(elapsed) s"
[ "${1:-}" = "--build-only" ] && exit 0

# run LIMIT CMD...: one process under a time limit; its exit status in RC.
run() {
  local limit=$1; shift
  timeout -k 5 "$limit" "$@"
  RC=$?
  case $RC in
    124|137) log "  (timed out after ${limit} s)";;
    0|1|2|6) ;;
    *) log "  (process ended with status $RC)";;
  esac
}

log ""
log "== environment (probe linked with NVRTC and nvJitLink) =="
run 30 "$B/fft_callbacks" env
log "-- ldd of the probe --"
ldd "$B/fft_callbacks" | grep -E "cufft|nvrtc|nvJitLink|cudart|libcuda" | sed 's/^/  /'
if [ -x "$B/fft_callbacks_minimal" ]; then
  log ""
  log "== environment (probe linking only cuFFT) =="
  run 30 "$B/fft_callbacks_minimal" env
fi

# The CUDA driver's error log (drivers of CUDA 12.9 and later read CUDA_LOG_FILE;
# older ones ignore it): collected per route and printed when not empty.
log ""
log "== routes: each in its own process; every cuFFT call printed with its result =="
FIRST=""
PARTIAL=""
SUMMARY=""
for r in $("$B/fft_callbacks" list); do
  log ""
  log "-- route $r: $("$B/fft_callbacks" describe "$r")"
  log "  [linkcheck: the callback code linked by nvJitLink against C++ declarations, no GPU]"
  run 20 "$B/fft_callbacks" linkcheck "$r" "$B"
  lc=$RC
  log "  [cuFFT]"
  rm -f "$B/driver_$r.log"
  CUDA_LOG_FILE="$B/driver_$r.log" run 30 "$B/fft_callbacks" route "$r" "$B"
  rc=$RC
  if [ -s "$B/driver_$r.log" ]; then
    log "  CUDA driver log:"; sed 's/^/    /' "$B/driver_$r.log" | head -20
  fi
  SUMMARY="$SUMMARY$(printf '\n  %-28s linkcheck %s, cuFFT %s' "$r" \
    "$([ $lc = 0 ] && echo ok || echo FAIL)" "$(case $rc in 0) echo WORKS;; 6) echo "PARTLY works";; *) echo "fails (rc $rc)";; esac)")"
  [ $rc = 0 ] && [ -z "$FIRST" ] && FIRST=$r
  [ $rc = 6 ] && [ -z "$PARTIAL" ] && PARTIAL=$r
  if [ "$(elapsed)" -gt 100 ]; then log "  (time budget: skipping the remaining routes)"; break; fi
done

if [ -x "$B/fft_callbacks_minimal" ] && [ "$(elapsed)" -lt 100 ]; then
  log ""
  log "-- route nvcc-fatbin-cxx in the probe linking only cuFFT (cuFFT opens NVRTC/nvJitLink)"
  run 20 "$B/fft_callbacks_minimal" route nvcc-fatbin-cxx "$B"
  SUMMARY="$SUMMARY$(printf '\n  %-28s cuFFT %s' "nvcc-fatbin-cxx (minimal)" \
    "$(case $RC in 0) echo WORKS;; 6) echo "PARTLY works";; *) echo "fails (rc $RC)";; esac)")"
fi

log ""
log "== summary ==$SUMMARY"
if [ -z "$FIRST" ] && [ -n "$PARTIAL" ]; then
  log ""
  log "no route made all four callback plans; timing the one that made some: $PARTIAL"
  FIRST=$PARTIAL
fi
if [ -z "$FIRST" ]; then
  log ""
  log "no route made any callback plan: no timing run"
  exit 1
fi
left=$(( BUDGET - $(elapsed) ))
[ $left -lt 20 ] && left=20
log ""
log "timing with route $FIRST (limit ${left} s; lines already printed survive a timeout)"
run "$left" "$B/fft_callbacks" route "$FIRST" "$B" --bench
log ""
log "done in $(elapsed) s"
