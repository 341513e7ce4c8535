"""Anatomy of a batched decode step on the device: where the wall time of one step goes, per backend.

For each variant the K/V state of ``--batch`` sequences of ``--context`` tokens is written directly (the same
random bytes for every backend, no prefill), then ``--steps`` decode steps run on the real model:

* sequential steps (build, then ``mx.async_eval``, then wait): host time building the graph in Python
  (``build``), host time inside ``mx.async_eval`` (MLX encoding the step's kernels: ``encode``), and the wait
  for the device (``wait``);
* pipelined steps (the next step is built and dispatched before the previous one's tokens are read, as the
  engine and mlx-lm do): ms per step, the throughput figure.

Variants: ``dense`` (mlx-lm BatchKVCache), ``slab`` (fused kernel, one scatter per slab per layer), ``slab128``
(slabs of 128 blocks: 4x fewer kernel inputs), ``monolithic`` (fused). Figures are medians over steps after
``--warmup`` steps (which pay MLX's kernel compiles).

    python3 -m lab.decode_step.step_anatomy --model synthetic:qwen3-0.6b --dtype bfloat16 --device gpu \\
        --batch 8 --context 4096 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

VARIANTS = ("dense", "slab", "slab128", "monolithic")
PROBES = ("slab-nowrite", "slab-nokernel", "slab-exact")  # diagnostics: writes skipped / kernel skipped / no padding
# (slab-exact patches the bucket schedule for the rest of the process: run it last)


def written_state(loaded, batch: int, context: int):
    """Per layer (K, V) [B, H, T, D] of random bytes in the model's dtype (seeded: every variant reads these)."""
    import mlx.core as mx

    args = loaded.model.args
    heads = args.num_key_value_heads
    head_dim = getattr(args, "head_dim", None) or args.hidden_size // args.num_attention_heads
    mx.random.seed(1)
    dtype = loaded.model.model.embed_tokens.weight.dtype
    layers = [(mx.random.normal((batch, heads, context, head_dim)).astype(dtype),
               mx.random.normal((batch, heads, context, head_dim)).astype(dtype))
              for _ in range(len(loaded.model.layers))]
    mx.eval(layers)
    return layers


def dense_factory(state):
    from mlx_lm.models.cache import BatchKVCache

    caches = []
    for keys, values in state:
        cache = BatchKVCache([0] * keys.shape[0])
        cache.update_and_fetch(keys, values)
        caches.append(cache)
    return lambda starts: caches, lambda caches: [a for c in caches for a in (c.keys, c.values)]


def paged_factory(loaded, state, *, design: str, slab_blocks: int, probe: str | None = None):
    import mlx.core as mx

    from app.workloads.fused_attention import DecodeDecisions, KernelRoute, install_paged_sdpa
    from app.workloads.paged_cache import PagedStep
    from pool import PagedKVPool, PoolConfig

    batch, context = state[0][0].shape[0], state[0][0].shape[2]
    pool = PagedKVPool(PoolConfig(num_layers=len(state), block_size=32, slab_blocks=slab_blocks, design=design))
    for seq_id in range(batch):
        pool.add_sequence(seq_id)
        pool.prepare_write(seq_id, 0, context)
        slots = pool.write_slots([seq_id], [0], context)
        for layer, (keys, values) in enumerate(state):
            pool.write(layer, slots, keys[seq_id:seq_id + 1].transpose(0, 2, 1, 3),
                       values[seq_id:seq_id + 1].transpose(0, 2, 1, 3))
        mx.eval([pool.slabs(layer) for layer in range(pool.config.num_layers)])
    route = KernelRoute().start()
    if probe == "slab-nowrite":
        pool.write = lambda *args, **kwargs: None  # timing only: the kernel reads stale rows
    if probe == "slab-nokernel":
        route = KernelRoute(run=lambda pool, layer, seq_ids, queries, **kw: queries, register=route.register,
                            backend=route.backend).start()
    if probe == "slab-exact":
        import pool.kernels.paged_decode_cuda as cuda_kernel

        cuda_kernel.slab_bucket = lambda n: n  # one kernel per exact slab count: no padding inputs
    routable = install_paged_sdpa(loaded.model) is not None
    geometry = pool.geometry
    decisions = DecodeDecisions(pool, dtype=geometry.dtype, head_dim=geometry.head_dim, routable=routable)

    def make(starts):
        step = PagedStep(pool, list(range(batch)), starts, 1, batched=True)
        step.set_fused(decisions.decide(batch, max(step.lengths)), route)
        make.last = step
        return step.caches()

    def finish(caches):
        make.last.check_served()
        make.last.run_counts()
        return []

    make.pool = pool
    return make, finish


def _run(loaded, make, finish, batch: int, context: int, steps: int, warmup: int) -> dict:
    import mlx.core as mx

    model = loaded.model
    tokens = mx.array([[7]] * batch)
    position = context
    build, encode, wait, seq_wall = [], [], [], []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        caches = make([position] * batch)
        logits = model(tokens, cache=caches)[:, -1, :]
        nxt = mx.argmax(logits, axis=-1)[:, None]
        state = finish(caches)
        t1 = time.perf_counter()
        mx.async_eval(nxt, *state)
        t2 = time.perf_counter()
        mx.eval(nxt)
        t3 = time.perf_counter()
        tokens, position = nxt, position + 1
        if i >= warmup:
            build.append(t1 - t0), encode.append(t2 - t1), wait.append(t3 - t2), seq_wall.append(t3 - t0)
    t0 = time.perf_counter()
    pending = None
    for _ in range(steps):  # pipelined: dispatch step n+1 before waiting for step n
        caches = make([position] * batch)
        logits = model(tokens, cache=caches)[:, -1, :]
        nxt = mx.argmax(logits, axis=-1)[:, None]
        mx.async_eval(nxt, *finish(caches))
        if pending is not None:
            pending.tolist()
        pending, tokens, position = nxt, nxt, position + 1
    pending.tolist()
    pipelined = (time.perf_counter() - t0) / steps
    ms = lambda xs: round(statistics.median(xs) * 1e3, 3)  # noqa: E731
    return {"build_ms": ms(build), "encode_ms": ms(encode), "wait_ms": ms(wait), "sequential_step_ms": ms(seq_wall),
            "pipelined_step_ms": round(pipelined * 1e3, 3), "pipelined_tok_s": round(batch / pipelined, 1)}


def _profile(loaded, make, finish, batch: int, position: int, steps: int, top: int = 30) -> None:
    """cProfile ``steps`` sequential steps (graph build and ``mx.async_eval``, not the wait); prints the functions
    with the most own time, per step."""
    import cProfile
    import pstats

    import mlx.core as mx

    model, tokens = loaded.model, mx.array([[7]] * batch)
    launch, dispatch = mx.fast.precompiled_cuda_kernel, mx.async_eval

    # MLX's functions are not Python functions, so cProfile books their time to the caller: wrapped, they get rows
    def precompiled_cuda_kernel_call(**kwargs):
        return launch(**kwargs)

    def async_eval_call(*arrays):
        return dispatch(*arrays)

    mx.fast.precompiled_cuda_kernel = precompiled_cuda_kernel_call
    profiler = cProfile.Profile()
    for _ in range(steps):
        profiler.enable()
        caches = make([position] * batch)
        nxt = mx.argmax(model(tokens, cache=caches)[:, -1, :], axis=-1)[:, None]
        async_eval_call(nxt, *finish(caches))
        profiler.disable()
        mx.eval(nxt)
        tokens, position = nxt, position + 1
    mx.fast.precompiled_cuda_kernel = launch
    stats = pstats.Stats(profiler)
    rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:top]
    total = sum(value[2] for value in stats.stats.values())
    print(f"profile: {total / steps * 1e3:.3f} ms own time per step")
    for (path, line, func), (cc, nc, tt, ct, _) in rows:
        print(f"  {tt / steps * 1e3:8.3f} ms {nc / steps:8.1f} calls  {ct / steps * 1e3:8.3f} cum  "
              f"{path.rsplit('/', 2)[-1] if '/' in path else path}:{line} {func}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="synthetic:qwen3-0.6b")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default="gpu")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", type=int, default=0,
                        help="also cProfile this many sequential steps per variant (build + encode), top functions")
    args = parser.parse_args()
    from app.models import load_model

    loaded = load_model(args.model, dtype=args.dtype, device=args.device, seed=0)
    state = written_state(loaded, args.batch, args.context)
    out = {}
    for name in args.variants.split(","):
        if name == "dense":
            make, finish = dense_factory(state)
        else:
            design = "monolithic" if name == "monolithic" else "slab"
            make, finish = paged_factory(loaded, state, design=design, slab_blocks=128 if name == "slab128" else 32,
                                          probe=name if name in PROBES else None)
        out[name] = _run(loaded, make, finish, args.batch, args.context, args.steps, args.warmup)
        if args.profile:
            _profile(loaded, make, finish, args.batch, args.context + args.steps * 2 + args.warmup, args.profile)
        print(name, json.dumps(out[name]), flush=True)
        del make, finish
    print(json.dumps(out) if args.json else json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
