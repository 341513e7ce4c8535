"""``slabscope load``: replay a scenario's requests against any OpenAI-compatible server and report TTFT, TPOT,
latency percentiles, throughput and errors (docs/serve.md).

The scenario gives the traffic (phases, requests in flight, prompt and generation lengths, shared prefixes, pauses,
conversations: ``app.serve.load_plan``); ``app.serve.load_client`` sends it as streamed requests and times them;
``app.serve.load_report`` computes the figures. No mlx: it runs anywhere the server can be reached. A server that
fails mid-run (refused or dropped connections, 5xx) is reported in the figures and the verdict; ``load`` itself
exits 0 once it has measured, 2 for a bad command line, 1 when the server cannot be reached at all.
"""

from __future__ import annotations

import asyncio
import json
import sys
from urllib.parse import urlsplit

from app.commands.arg_types import finite_float
from app.commands.errors import RunError, UsageError, output_file
from app.workloads.scenarios import DEFAULT_SCENARIO, ScenarioError, load_scenario, parse_overrides


def add_parser(sub) -> None:
    p = sub.add_parser("load", help="drive an OpenAI-compatible server with a scenario's requests; TTFT, TPOT, "
                                    "latency, throughput")
    p.add_argument("--url", default="http://127.0.0.1:8080", help="the server (default http://127.0.0.1:8080)")
    p.add_argument("--scenario", default=DEFAULT_SCENARIO, help=f"scenario name or .toml (default {DEFAULT_SCENARIO})")
    p.add_argument("--set", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                   help="override scenario parameters (e.g. --set n=16 prompt_tokens=2048)")
    p.add_argument("--seed", type=int, default=0, help="draws of lengths and prompt offsets (default 0)")
    p.add_argument("--model", default=None, help="model name to request (default: the first in GET /v1/models)")
    p.add_argument("--endpoint", choices=("completions", "chat"), default="completions",
                   help="completions (the prompt as is; default) or chat (one user message)")
    p.add_argument("--tokenizer", default=None, metavar="PATH",
                   help="tokenizer.json (or a model directory holding one): prompts cut at exact token counts")
    p.add_argument("--chars-per-token", type=finite_float(0.1, 64.0), default=4.0,
                   help="without --tokenizer, characters per prompt token (default 4; 1 for byte tokenizers)")
    p.add_argument("--temperature", type=finite_float(0.0, 2.0), default=0.0, help="default 0 (greedy)")
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false", default=True,
                   help="let requests stop at end-of-sequence (default: ask for every max_tokens, vLLM's ignore_eos)")
    p.add_argument("--rate", type=finite_float(0.0, above=True), default=None, metavar="REQ_PER_S",
                   help="Poisson arrivals at this rate (still at most the phase's concurrency in flight)")
    p.add_argument("--timeout", type=finite_float(1.0), default=600.0, metavar="SECONDS",
                   help="one request's limit (default 600)")
    p.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    p.add_argument("--out", default=None, metavar="FILE", help="also write the JSON report to FILE")
    p.set_defaults(func=main)


def check_url(url: str) -> str:
    """``url`` without a trailing slash; UsageError unless it is http(s)://host[:port]."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--url {url!r} is not an http(s)://host[:port] address")
    try:
        parts.port
    except ValueError as exc:
        raise UsageError(f"--url {url!r}: {exc}") from None
    return url.rstrip("/").removesuffix("/v1")


def main(args) -> int:
    from app.serve.load_plan import TokenCounter, plan_load

    url = check_url(args.url)
    if args.out is not None:
        output_file(args.out, "--out")
    try:
        scenario = load_scenario(args.scenario, parse_overrides(args.set))
        counter = TokenCounter(args.tokenizer) if args.tokenizer else None
        phases = plan_load(scenario, args.seed, counter, args.chars_per_token)
    except (ScenarioError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    report = asyncio.run(_run(args, url, scenario.name, phases))
    text = json.dumps(report, indent=2)
    if args.out is not None:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    if args.json:
        print(text)
    else:
        from app.serve.load_report import render

        print(render(report))
    return 0


async def _run(args, url: str, scenario: str, phases) -> dict:
    from app.serve.load_client import Target, run_phases
    from app.serve.load_report import summarize

    model = args.model or await _served_model(url)
    target = Target(url, model, args.endpoint, args.temperature, args.ignore_eos, args.timeout)
    total = sum(len(p.requests) for p in phases)
    done = [0]

    def progress(result) -> None:
        done[0] += 1
        if not args.json and (done[0] % max(1, total // 10) == 0 or done[0] == total):
            print(f"load: {done[0]}/{total} requests", file=sys.stderr, flush=True)

    results = await run_phases(target, phases, rate=args.rate, seed=args.seed, on_result=progress)
    return summarize(results, url=url, model=model, scenario=scenario, health=await _health(url))


async def _served_model(url: str) -> str:
    """The first model id of ``GET /v1/models``; RunError (exit 1) when the server cannot be reached."""
    import aiohttp

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            async with session.get(url + "/v1/models") as response:
                body = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise RunError(f"cannot reach {url}/v1/models: {type(exc).__name__}: {exc}") from None
    data = body.get("data") if isinstance(body, dict) else None
    if not data or not isinstance(data[0], dict) or not data[0].get("id"):
        raise RunError(f"{url}/v1/models names no model: pass --model")
    return str(data[0]["id"])


async def _health(url: str) -> str:
    """``GET /health`` after the run, in a few words (a server that died says so here)."""
    import aiohttp

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            async with session.get(url + "/health") as response:
                body = (await response.text())[:200]
                return f"HTTP {response.status} {body}"
    except (aiohttp.ClientError, TimeoutError) as exc:
        return f"unreachable: {type(exc).__name__}: {exc}"
