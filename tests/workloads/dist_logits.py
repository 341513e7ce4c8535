"""Run under ``mlx.launch`` by test_distributed.py: every rank shards a tiny model with mlx-lm's ``shard()``, runs a
scenario on the slab and dense backends and saves every decode step's logits and the generated tokens.

    mlx.launch -n 2 --backend ring -- dist_logits.py OUT_DIR SCENARIO.toml MODEL [MODEL ...]

Writes ``OUT_DIR/<model>-<backend>-r<rank>.npz`` (logits per decode step, keys "0", "1", ...) and ``.json`` (the
run's ``outputs`` block).
"""

import json
import sys

from app.models.blas import enable_openblas

enable_openblas()


def main(out: str, scenario: str, models: list[str]) -> None:
    import mlx.core as mx

    from app.models import load_model
    from app.workloads.rank_main import init_group
    from app.workloads.runner import run_workload
    from app.workloads.sharding import shard_loaded
    from app.workloads.spec import RunSpec

    group = init_group("ring", 2)
    for name in models:
        loaded, _ = shard_loaded(load_model(name, dtype="float32", device="cpu"), group)
        for backend in ("slab", "dense"):
            logits: list = []
            spec = RunSpec(scenario=scenario, backend=backend, model=name, block_size=4, slab_blocks=2,
                           prefill_chunk=16)
            summary = run_workload(spec, lambda e: None, loaded=loaded,
                                   logits_hook=lambda ids, lg: logits.append(lg))
            stem = f"{out}/{name.replace(':', '_')}-{backend}-r{group.rank()}"
            mx.savez(stem + ".npz", **{str(i): lg for i, lg in enumerate(logits)})
            with open(stem + ".json", "w") as fh:
                json.dump(summary["outputs"], fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
