#!/usr/bin/env bash
# Fresh-process records of the burst, interleaved: ROUNDS_BURST rounds of the burst and ROUNDS_HEAVY of the
# decode-heavy case (lab/device_setup.sh), each round one `slabscope record --backends slab,dense` (odd rounds) or `dense,slab` (even), so
# each backend runs in its own fresh worker process per round. Each round's compare table is in $OUT/<case><round>.txt
# and its recordings in $OUT/series.tar.gz (<case><round>/*.slabrec); the docs' table comes from them
# (`python3 -m lab.record_figures DIR` per round). Settings pass through to the workers: SLABSCOPE_REHEARSAL=0,
# MLX_CUDA_GRAPH_CACHE_SIZE=400 (the dense-footprint check of docs/measurements-log.md). From the repository root, on
# the GPU:
#
#   OUT=/tmp/series ROUNDS_BURST=5 ROUNDS_HEAVY=3 bash lab/first_step/record_rounds.sh
OUT=${OUT:-/tmp/series}
source "$(dirname "$0")/../device_setup.sh"
series() {  # name rounds args...
  local name=$1 rounds=$2; shift 2
  for r in $(seq 1 "$rounds"); do
    order=slab,dense; (( r % 2 == 0 )) && order=dense,slab
    timeout 120 $py -m app record "$@" "${model[@]}" --backends $order --out "$OUT/$name$r" > "$OUT/$name$r.txt" 2>&1
    echo "$name$r ($order): exit $?"
  done
}
mkdir -p "$OUT"
series burst "${ROUNDS_BURST:-5}" "${burst[@]}"
series heavy "${ROUNDS_HEAVY:-3}" "${heavy[@]}"
# one archive instead of two files per round (the device tool returns a limited number of files)
tar -czf "$OUT/series.tar.gz" -C "$OUT" $(cd "$OUT" && ls -d burst* heavy* 2>/dev/null | grep -v '\.txt$') \
  && (cd "$OUT" && ls -d burst* heavy* | grep -v '\.txt$' | xargs rm -rf)
