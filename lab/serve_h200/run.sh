#!/usr/bin/env bash
# Issue 28's H200 figures: slabscope load against slabscope serve --backend slab, --backend dense and stock
# mlx_lm.server on the same model (synthetic:qwen3-0.6b, bf16, written as an mlx-lm directory) and the same two
# scenarios (a burst: 16 x 2048-token prompts, 128 generated; ragged long context: 16 concurrent prompts of
# 1k-12k tokens, 32 generated), 3 interleaved rounds of fresh server processes; tok/s, TTFT and TPOT p50/p99, peak
# memory per server (max(active+cache) from its probes, RSS of its process tree, nvidia-smi's device memory);
# median and range. From the repository root, on the GPU machine, with the wheels of fetch_wheels.sh in .whl/:
#
#   bash lab/serve_h200/run.sh            # writes $OUT/serve_h200.json and prints the table; about 6-8 minutes
#   SMALL=1 OUT=/tmp/s bash lab/serve_h200/run.sh   # the same on a tiny model on a CPU (about 4 minutes)
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
py=${PY:-python3}
wheels=${WHEELS:-.whl}
if ! $py -c "import aiohttp" 2>/dev/null; then  # not on the GPU image: the pure-Python wheels of fetch_wheels.sh
  $py -m pip install -q --no-index --no-deps "$wheels"/aiohttp-*.whl "$wheels"/multidict-*.whl "$wheels"/yarl-*.whl \
    "$wheels"/frozenlist-*.whl "$wheels"/propcache-*.whl "$wheels"/aiosignal-*.whl "$wheels"/aiohappyeyeballs-*.whl \
    "$wheels"/attrs-*.whl "$wheels"/idna-*.whl "$wheels"/typing_extensions-*.whl || exit 1
fi
$py -c "import msgspec" 2>/dev/null || $py -m pip install -q --no-index --no-deps "$wheels"/msgspec-*.whl
mkdir -p "${OUT:=/tmp/serve_h200}"
timeout 560 $py -m lab.serve_h200.bench --out "$OUT" ${SMALL:+--small} --deadline-s "${DEADLINE_S:-480}"
