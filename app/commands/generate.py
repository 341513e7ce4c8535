"""``slabscope generate``: answer one prompt through the chat template on a chosen KV backend.

Greedy by default (``--temperature``/``--top-p``/``--seed`` for sampling). The prompt runs through the same
scheduler/engine as the workloads, so ``--backend slab|monolithic|dense`` exercises the same KV paths.

After the answer, on stderr, what mlx-lm's ``generate`` prints: the prompt's tokens and prefill tok/s, the generated
tokens and decode tok/s (``probes.figures.tok_s`` over the run's steps), and memory: the footprint (max(active +
cache), sampled after every step: MLX's peak counter misses the buffer cache), MLX's peak beside it, and RSS.
"""

from __future__ import annotations

import sys
import time

from app.commands.arg_types import finite_float, positive_int
from app.commands.errors import RunError, UsageError
from app.models.registry import DTYPE_NAMES
from app.workloads.limits import check_request_fits
from app.workloads.spec import BACKENDS
from pool.config import DEFAULT_BLOCK_SIZE, DEFAULT_SLAB_BLOCKS
from pool.errors import PoolError


def add_parser(sub) -> None:
    p = sub.add_parser("generate", help="generate an answer to one prompt (greedy by default)")
    p.add_argument("--prompt", required=True, help="the user message")
    p.add_argument("--backend", choices=BACKENDS, default="slab")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--max-tokens", type=positive_int, default=128)
    p.add_argument("--temperature", type=finite_float(0.0), default=0.0, help="0 (default): greedy")
    p.add_argument("--top-p", type=finite_float(0.0, 1.0), default=0.0, help="nucleus mass in [0, 1] (0: off)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default=None, choices=DTYPE_NAMES)
    p.add_argument("--device", choices=("cpu", "gpu"), default=None)
    p.add_argument("--no-chat-template", action="store_true", help="feed the prompt text as is")
    p.add_argument("--block-size", type=positive_int, default=32)
    p.add_argument("--slab-blocks", type=positive_int, default=32)
    p.set_defaults(func=main)


def _error(text: str) -> int:
    print(f"slabscope generate: {text}", file=sys.stderr)
    return 2


def prompt_ids(tokenizer, text: str, use_template: bool) -> list[int]:
    """Token ids of ``text``: through the chat template when the tokenizer has one (and it is wanted)."""
    if use_template and getattr(tokenizer, "has_chat_template", True):
        try:
            ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
            return list(ids)
        except ValueError:
            pass  # no template (synthetic byte tokenizer): plain text
    return list(tokenizer.encode(text))


def generate(loaded, ids: list[int], *, backend: str, max_tokens: int, temperature: float = 0.0,
             top_p: float = 0.0, seed: int = 0, block_size: int = DEFAULT_BLOCK_SIZE,
             slab_blocks: int = DEFAULT_SLAB_BLOCKS, stats: "GenerateStats | None" = None) -> list[int]:
    """Generated token ids for prompt ``ids`` (stops at EOS or ``max_tokens``). ``stats``: filled with every step
    and the footprint sampled after each."""
    import mlx.core as mx

    from app.workloads.engine import Engine, make_sampler
    from app.workloads.scheduler import Request, Scheduler
    from app.workloads.session import make_backend
    from app.workloads.spec import RunSpec

    from app.workloads.fused_attention import KernelRoute, install_paged_sdpa, uninstall_paged_sdpa

    mx.random.seed(seed)
    spec = RunSpec(backend=backend, model=loaded.name, prefix_cache=False)
    route = module = None
    if backend != "dense":  # decode on the fused kernel where the pool decides so (GPU), else gather
        route, module = KernelRoute().start(), install_paged_sdpa(loaded.model)
    kv = make_backend(spec, loaded, {"block_size": block_size, "slab_blocks": slab_blocks}, kernel_route=route,
                      routable=module is not None)
    try:
        scheduler = Scheduler(prefill_chunk=256, admit_fn=kv.admit, release_fn=kv.release)
        engine = Engine(loaded.model, kv, scheduler, sampler=make_sampler(temperature, top_p))
        scheduler.submit([Request(0, ids, max_tokens, "generate", stop_tokens=frozenset(loaded.eos_token_ids))])
        stats = stats if stats is not None else GenerateStats()
        while (result := engine.step()) is not None:
            stats.add(result)
        seq = scheduler.finished[0]
    finally:
        kv.close()
        uninstall_paged_sdpa(module)
    out = seq.generated
    return out[:-1] if out and out[-1] in loaded.eos_token_ids else out


class GenerateStats:
    """The steps of one generation (as ``probes.events.Step`` events on a read model, so tok/s is
    ``probes.figures.tok_s``) and the footprint tracked after each (``app.workloads.footprint``)."""

    def __init__(self) -> None:
        from app.workloads.footprint import FootprintTracker
        from probes.store import SessionModel

        self.model = SessionModel(label="generate", source="generate")
        self.footprint = FootprintTracker()
        self.footprint.sample()  # the weights and whatever was there before the first step
        self.elapsed = 0.0

    def add(self, result) -> None:
        from probes.events import Step

        self.elapsed += result.wall_s
        self.model.add_event(Step(t=self.elapsed, phase="generate", type=result.kind, batch=result.batch,
                                  num_tokens=result.num_tokens, wall_s=result.wall_s))
        self.footprint.sample()

    def lines(self, prompt_tokens: int, generated: int) -> list[str]:
        """mlx-lm's closing lines, with slabscope's footprint."""
        from pool.units import format_bytes
        from probes import figures

        prefill = figures.tok_s(self.model, "prefill")
        decode = figures.tok_s(self.model, "decode")
        fp = self.footprint.summary()
        return [f"Prompt: {prompt_tokens} tokens, {figures.format_tok_s(prefill)} {figures.LABELS['tok_s:prefill']}",
                f"Generation: {generated} tokens, {figures.format_tok_s(decode)} {figures.LABELS['tok_s:decode']}",
                f"Peak memory: {figures.LABELS['footprint']} {format_bytes(fp['max_footprint_bytes'])} sampled after "
                f"every step (a shorter peak inside a step falls between samples); MLX's peak counter "
                f"{format_bytes(fp['mlx_peak_bytes'])} (active memory only, every instant); RSS "
                f"{format_bytes(fp['max_rss_bytes'])}"]


def check_prompt_text(text: str) -> None:
    """UsageError for a prompt that is not text: undecodable command-line bytes arrive as lone surrogates
    (Python's surrogateescape) that no tokenizer can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(f"--prompt is not valid UTF-8 text (undecodable byte at character {exc.start})") from None


def main(args) -> int:
    check_prompt_text(args.prompt)
    from app.models.blas import enable_openblas
    from app.models.registry import resolve_model_name

    try:
        resolve_model_name(args.model)
    except ValueError as exc:
        return _error(str(exc))
    enable_openblas()
    from app.models import load_model

    try:
        loaded = load_model(args.model, dtype=args.dtype, device=args.device, seed=args.seed)
    except ValueError as exc:
        return _error(str(exc))
    ids = prompt_ids(loaded.tokenizer, args.prompt, not args.no_chat_template)
    if not ids:
        raise UsageError("--prompt encodes to no tokens (an empty prompt needs the chat template)")
    try:
        check_request_fits(len(ids), args.max_tokens, loaded.max_positions, loaded.name)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    t0 = time.perf_counter()
    stats = GenerateStats()
    try:
        out = generate(loaded, ids, backend=args.backend, max_tokens=args.max_tokens, temperature=args.temperature,
                       top_p=args.top_p, seed=args.seed, block_size=args.block_size, slab_blocks=args.slab_blocks,
                       stats=stats)
    except PoolError as exc:  # a slab the device cannot hold, a budget: one line
        raise RunError(str(exc)) from None
    elapsed = time.perf_counter() - t0
    print(loaded.tokenizer.decode(out), flush=True)  # the answer before the figures, also when both are a terminal
    print("==========", file=sys.stderr)
    for line in stats.lines(len(ids), len(out)):
        print(line, file=sys.stderr)
    print(f"[{args.backend} | {loaded.name} {loaded.dtype} | {len(ids)} prompt + {len(out)} generated tokens in "
          f"{elapsed:.2f} s]", file=sys.stderr)
    return 0
