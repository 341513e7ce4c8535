#!/usr/bin/env bash
# Slab size against the decode step's host time: every kernel launch hands MLX one input per K and
# per V slab (plus padding to the slab bucket), and MLX's per-input cost is host time in every layer of every decode
# step, so fewer, larger slabs cut it, at the price of coarser growth (footprint). For each workload (burst,
# decode-heavy; lab/device_setup.sh) and each slab size in SLAB_SIZES (rows per slab; the default 32 first):
# engine_anatomy.py (dense and slab warm rounds in one process: build, encode, step) and the workload's
# `record ... --backends slab,dense` (fresh processes: tok/s, footprint), then lab/record_figures.py per record.
# Everything ends in $OUT/slab_size.tar.gz. From the repository root, on the GPU:
#
#   OUT=$OUT ROUNDS=3 SLAB_SIZES="32 64" bash lab/decode_step/slab_size.sh
OUT=${OUT:-/tmp/slab_size}
mkdir -p "$OUT"
source "$(dirname "$0")/../device_setup.sh"  # sets py, model, burst, heavy; builds the default size's kernels
for size in ${SLAB_SIZES:-32 64}; do
  for w in burst heavy; do
    if [ "$w" = burst ]; then args=("${burst[@]}"); else args=("${heavy[@]}"); fi
    sets=("${args[@]:2}")  # engine_anatomy.py takes the --set items (its scenario is distinct_burst)
    timeout 200 $py -m lab.decode_step.engine_anatomy "${sets[@]}" --backends slab,dense --slab-blocks "$size" \
      --rounds "${ROUNDS:-3}" > "$OUT/anatomy_${w}_$size.txt" 2>&1
    echo "anatomy $w $size: exit $?"
    timeout 150 $py -m app record "${args[@]}" "${model[@]}" --backends slab,dense --slab-blocks "$size" \
      --out "$OUT/rec_${w}_$size" > "$OUT/rec_${w}_$size.txt" 2>&1
    echo "record $w $size: exit $?"
    $py -m lab.record_figures "$OUT/rec_${w}_$size" > "$OUT/report_${w}_$size.txt" 2>&1
  done
done
(cd "$OUT" && tar -czf ../slab_size.tar.gz . && rm -rf ./* && mv ../slab_size.tar.gz .)
