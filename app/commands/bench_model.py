"""``slabscope bench model``: load time, prefill and decode speed of one model with stock mlx-lm caches.

Prints figures, asserts nothing (speed targets live in benchmarks, not tests). Decode is timed per token with a
synchronous eval, as ``greedy_generate`` runs it: single sequence, batch 1.
"""

from __future__ import annotations

import time

from app.commands.arg_types import positive_int


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--device", default=None, choices=["cpu", "gpu"])
    parser.add_argument("--prompt-tokens", type=positive_int, default=256, help="prefill length (tokens)")
    parser.add_argument("--decode-tokens", type=positive_int, default=64)
    parser.add_argument("--blas", action="store_true", help="also measure fp32/bf16 matmul GFLOP/s")


def main(args) -> int:
    from app.models.blas import enable_openblas

    print(enable_openblas())
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from app.models.blas import measure_matmul_gflops
    from app.models.registry import load_model

    if args.blas:
        print(f"fp32 matmul 1024^3: {measure_matmul_gflops():.1f} GFLOP/s; "
              f"bf16 matmul 512^3: {measure_matmul_gflops(512, 3, 'bfloat16'):.1f} GFLOP/s")
    start = time.perf_counter()
    loaded = load_model(args.model, dtype=args.dtype, device=args.device)
    load_s = time.perf_counter() - start
    print(f"model {loaded.name} ({loaded.family}, {loaded.dtype}, {loaded.device}): load {load_s:.2f} s, "
          f"weights {loaded.weight_bytes / 2**20:.1f} MiB, {loaded.num_layers} layers, "
          f"{loaded.n_kv_heads} KV heads x {loaded.head_dim}")
    prompt = mx.array([[(17 * i + 11) % loaded.vocab_size for i in range(args.prompt_tokens)]], dtype=mx.uint32)
    cache = make_prompt_cache(loaded.model)
    start = time.perf_counter()
    logits = loaded.model(prompt, cache=cache)[:, -1]
    token = mx.argmax(logits, axis=-1)
    mx.eval(token)
    prefill_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(args.decode_tokens):
        token = mx.argmax(loaded.model(token[:, None], cache=cache)[:, -1], axis=-1)
        mx.eval(token)
    decode_s = time.perf_counter() - start
    print(f"prefill {args.prompt_tokens} tokens: {prefill_s:.2f} s ({args.prompt_tokens / prefill_s:.0f} tok/s); "
          f"decode {args.decode_tokens} tokens: {decode_s:.2f} s ({args.decode_tokens / decode_s:.1f} tok/s)")
    return 0
