"""Tensor-parallel sharding of a loaded model with mlx-lm's own ``Model.shard(group)``, and the shard map it gives.

mlx-lm's ``shard()`` (llama, qwen2/qwen3 and other families) keeps every layer on every rank and splits each
attention layer's Q/K/V projections by output rows into ``N`` equal contiguous parts (``shard_linear``
"all-to-sharded": rank ``k`` holds heads ``[k*h, (k+1)*h)``), the output projection by input columns
("sharded-to-all": partial products summed by ``mx.distributed.all_sum``), and the MLP the same way. Embedding,
norms and LM head stay whole on every rank. So each rank's KV cache holds ``n_kv_heads / N`` heads of every layer,
and its pool (or mlx-lm's dense caches) simply sees K/V tensors with fewer heads.
"""

from __future__ import annotations

import dataclasses

_ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}


def shard_map(*, rank: int, world_size: int, num_layers: int, n_kv_heads_total: int, n_heads_total: int,
              head_dim: int, dtype: str, weight_bytes: int) -> dict:
    """What rank ``rank`` of ``world_size`` holds (plain data for the recording's meta; pure function)."""
    kv, q = n_kv_heads_total // world_size, n_heads_total // world_size
    return {
        "method": "tensor parallel (mlx_lm Model.shard)" if world_size > 1 else "whole model (1 rank)",
        "layers": [0, num_layers], "num_layers": num_layers,
        "kv_heads": [rank * kv, (rank + 1) * kv], "n_kv_heads": kv, "n_kv_heads_total": n_kv_heads_total,
        "q_heads": [rank * q, (rank + 1) * q], "head_dim": head_dim, "dtype": dtype,
        "kv_bytes_per_token": 2 * num_layers * kv * head_dim * _ITEMSIZE[dtype],
        "kv_bytes_per_token_total": 2 * num_layers * n_kv_heads_total * head_dim * _ITEMSIZE[dtype],
        "weight_bytes": weight_bytes,
    }


def shard_loaded(loaded, group):
    """Shard ``loaded.model`` in place across ``group`` (nothing to do for a group of one) and return
    ``(loaded', shard_map)``: a copy of the ``LoadedModel`` whose ``n_kv_heads`` and ``weight_bytes`` are this
    rank's, so the session's meta, the pool and the probes' weight accounting describe the rank, not the model.
    Raises ValueError (one line) when the family has no ``shard()`` or its heads do not split evenly."""
    from app.models.registry import parameter_bytes

    size, rank = group.size(), group.rank()
    n_heads = int(loaded.model.args.num_attention_heads)
    if size > 1:
        if not hasattr(loaded.model, "shard"):
            raise ValueError(f"mlx-lm's {loaded.family} model has no shard(): it cannot run tensor parallel")
        for what, count in (("KV heads", loaded.n_kv_heads), ("attention heads", n_heads)):
            if count % size:
                raise ValueError(f"{loaded.name} has {count} {what}, which do not split evenly across {size} ranks")
        loaded.model.shard(group)
        _settle(loaded.model)
    attn = loaded.model.layers[0].self_attn
    local_kv = int(getattr(attn, "n_kv_heads", loaded.n_kv_heads // size))
    if local_kv * size != loaded.n_kv_heads:
        raise RuntimeError(f"shard() left {local_kv} KV heads per rank, expected {loaded.n_kv_heads // size}")
    weights = parameter_bytes(loaded.model)
    smap = shard_map(rank=rank, world_size=size, num_layers=loaded.num_layers, n_kv_heads_total=loaded.n_kv_heads,
                     n_heads_total=n_heads, head_dim=loaded.head_dim, dtype=loaded.dtype, weight_bytes=weights)
    return dataclasses.replace(loaded, n_kv_heads=local_kv, weight_bytes=weights), smap


def _settle(model) -> None:
    """Materialise the shards, then drop what the whole model left behind: ``load_model`` evaluated every weight
    before sharding (mlx-lm's own ``sharded_load`` never does), so its freed buffers would otherwise sit in MLX's
    cache and its peak counter would remember the whole model; neither belongs to the rank's footprint."""
    import mlx.core as mx

    from pool.copy_meter import reset_peak_memory

    mx.eval(model.parameters())
    mx.clear_cache()
    reset_peak_memory()  # MLX's counter and the copy meter's corrected peak (pool/copy_meter.py) together
