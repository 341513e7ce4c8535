"""The figures of a ``slabscope load`` run, from its timed requests (mlx-free, pure).

Definitions (those of vLLM's serving benchmark, so the figures compare with it):

* time to first token (TTFT): from sending a request to the first chunk that carries text;
* time per output token (TPOT): (end - first token) / (output tokens - 1), for requests of two tokens or more;
* inter-token latency (ITL): the gaps between consecutive text chunks;
* request latency: from sending to the end of the stream (``[DONE]``);
* throughput over the run's duration (the first request sent to the last one ended): output tokens per second,
  prompt + output tokens per second, requests per second.

Percentiles interpolate linearly between the sorted values (numpy's default). Failed requests count in ``errors``
by class, with the first message of each, and never in the latency figures; a server that refused or dropped
connections, or answered 5xx, is said to have failed in ``verdict`` (for instance out of memory), which is not a
failure of ``load``.
"""

from __future__ import annotations

import math

from app.serve.load_client import ERROR_CLASSES, RequestResult

PERCENTILES = (50, 90, 99)


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``values`` by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def distribution(values: list[float], scale: float = 1.0) -> dict:
    """mean and p50/p90/p99 of ``values`` times ``scale`` (None when there are none)."""
    out = {"mean": (sum(values) / len(values) * scale) if values else None}
    for q in PERCENTILES:
        value = percentile(values, q)
        out[f"p{q}"] = None if value is None else value * scale
    out["n"] = len(values)
    return out


def summarize(results: list[RequestResult], *, url: str = "", model: str = "", scenario: str = "",
              health: str | None = None) -> dict:
    """The run's figures (see the module docstring); times in milliseconds, rates per second."""
    ok = [r for r in results if r.ok]
    started = min((r.sent for r in results), default=0.0)
    ended = max((r.end for r in ok), default=started)
    duration = max(ended - started, 0.0)
    output = sum(r.output_tokens for r in ok)
    prompt = sum(r.prompt_tokens or 0 for r in ok)
    ttft = [r.first - r.sent for r in ok if r.first is not None]
    tpot = [(r.end - r.first) / (r.output_tokens - 1) for r in ok if r.first is not None and r.output_tokens > 1]
    itl = [b - a for r in ok for a, b in zip(r.chunks, r.chunks[1:])]
    errors = {kind: [r for r in results if r.error == kind] for kind in ERROR_CLASSES}
    report = {
        "url": url, "model": model, "scenario": scenario,
        "requests": len(results), "completed": len(ok), "duration_s": round(duration, 4),
        "prompt_tokens": prompt, "output_tokens": output,
        "prompt_tokens_mean": round(prompt / len(ok), 1) if ok else None,
        "output_tokens_mean": round(output / len(ok), 1) if ok else None,
        "throughput": {"output_tok_s": _rate(output, duration), "total_tok_s": _rate(prompt + output, duration),
                       "requests_s": _rate(len(ok), duration)},
        "ttft_ms": distribution(ttft, 1e3), "tpot_ms": distribution(tpot, 1e3), "itl_ms": distribution(itl, 1e3),
        "latency_ms": distribution([r.end - r.sent for r in ok], 1e3),
        "errors": {kind: {"count": len(rs), "first": rs[0].message} for kind, rs in errors.items() if rs},
        "server_health_after": health,
    }
    report["verdict"] = verdict(report)
    return report


def _rate(count: float, seconds: float) -> float | None:
    return round(count / seconds, 3) if seconds > 0 else None


def verdict(report: dict) -> str:
    """One line: every request answered, or how the server failed (never a failure of ``load``)."""
    errors = report["errors"]
    if not errors:
        return f"ok: {report['completed']} of {report['requests']} requests answered"
    failed = sum(e["count"] for e in errors.values())
    texts = " ".join(e["first"] for e in errors.values()).lower()
    health = (report.get("server_health_after") or "").lower()
    if "likely out of memory" in texts or "likely out of memory" in health or "out of memory" in health:
        cause = "the server ran out of memory (its engine was killed by the out-of-memory killer, likely)"
    elif "killed by signal" in texts or "killed by signal" in health:
        cause = "the server's engine was killed (" + _killed(texts + " " + health) + ")"
    elif "refused" in errors or "reset" in errors:
        cause = "the server stopped answering (connections refused or dropped: crashed or killed, out of memory?)"
    elif "http_5xx" in errors:
        cause = "the server failed requests (HTTP 5xx)"
    elif "timeout" in errors:
        cause = "requests timed out"
    else:
        cause = "the server refused or broke requests"
    return f"server failed: {cause}: {failed} of {report['requests']} requests failed"


def _killed(text: str) -> str:
    start = text.find("killed by signal")
    return text[start:start + 40].split(";")[0].split(")")[0] + ")" if start >= 0 else "killed"


def render(report: dict) -> str:
    """The report as a few lines of text and a small table (what ``load`` prints without ``--json``)."""
    t = report["throughput"]
    lines = [f"{report['url']}  model {report['model']}  scenario {report['scenario']}",
             f"requests {report['completed']}/{report['requests']} in {report['duration_s']:.2f} s; prompt tokens "
             f"{report['prompt_tokens']:,}, output tokens {report['output_tokens']:,}",
             f"throughput: {_fmt(t['output_tok_s'])} output tok/s, {_fmt(t['total_tok_s'])} total tok/s, "
             f"{_fmt(t['requests_s'])} req/s", "",
             f"{'ms':<14}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}{'n':>7}"]
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("latency_ms", "latency")):
        d = report[key]
        lines.append(f"{label:<14}" + "".join(f"{_fmt(d[k]):>10}" for k in ("mean", "p50", "p90", "p99"))
                     + f"{d['n']:>7}")
    lines.append("")
    for kind, error in report["errors"].items():
        lines.append(f"errors {kind}: {error['count']} (first: {error['first']})")
    if report.get("server_health_after"):
        lines.append(f"server health after the run: {report['server_health_after']}")
    lines.append(report["verdict"])
    return "\n".join(lines)


def _fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if abs(value) < 1e5 else f"{value:,.0f}"
