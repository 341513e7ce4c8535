#!/usr/bin/env bash
# The numerics tests (pytest marker `numerics`) under every BLAS MLX can run on this machine: OpenBLAS with each
# core type named on the command line (default: the machine's own choice, Prescott, Haswell, SkylakeX, Cooperlake,
# SapphireRapids; OpenBLAS 0.3.21 falls back to its own detection for a name it does not know, which its "core" in
# the BLAS line shows) and MLX's bundled reference BLAS (SLABSCOPE_BLAS=reference). Prints, per BLAS, the BLAS
# line, pytest's summary and the largest difference each tolerance-compared test measured, in eps * magnitude
# units (tests/workloads/helpers.py, reorder_tolerance). MARK: the pytest -m expression (default "numerics").
# Usage: bash lab/numerics_by_blas.sh [core ...]      e.g. MARK="numerics and not slow" bash lab/numerics_by_blas.sh
set -u
cd "$(dirname "$0")/.."
MARK=${MARK:-numerics}
cores=("$@")
[ ${#cores[@]} -eq 0 ] && cores=(own Prescott Haswell SkylakeX Cooperlake SapphireRapids reference)
out=$(mktemp -d)
for core in "${cores[@]}"; do
    report="$out/$core.jsonl"
    env=(OPENBLAS_NUM_THREADS=2 SLABSCOPE_NUMERICS_REPORT="$report")
    case $core in
        own) ;;
        reference) env+=(SLABSCOPE_BLAS=reference) ;;
        *) env+=(OPENBLAS_CORETYPE="$core") ;;
    esac
    line=$(env -u OPENBLAS_CORETYPE "${env[@]}" .venv/bin/python -c "from app.models.blas import enable_openblas; print(enable_openblas())")
    summary=$(env -u OPENBLAS_CORETYPE "${env[@]}" .venv/bin/python -m pytest -q -p no:cacheprovider -m "$MARK" 2>&1 | tail -1)
    echo "== $core: $line"
    echo "   $summary"
    [ -f "$report" ] && .venv/bin/python - "$report" <<'PY'
import json, sys
worst = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    worst[r["test"]] = max(worst.get(r["test"], 0.0), r["eps_units"])
for test, units in sorted(worst.items()):
    print(f"   {units:6.2f} eps*mag  {test}")
print(f"   {max(worst.values()):6.2f} eps*mag  largest")
PY
done
rm -rf "$out"
