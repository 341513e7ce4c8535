"""Workload scenarios: TOML files under ``assets/scenarios/``, selectable by name, parameters overridable.

A scenario file has a ``description``, a ``[params]`` table (the knobs ``--set k=v`` overrides), an optional
``[pool]`` table (suggested ``block_size``/``slab_blocks``/``prefill_chunk``; command-line flags win) and a list
of ``[[phases]]`` run one after the other, each marked by start/end events:

- ``kind = "idle"``: nothing runs for ``seconds``;
- ``kind = "requests"``: ``count`` requests with ``prompt_tokens`` and ``gen_tokens`` (an int or ``[min, max]``,
  drawn per request from the run's seed), at most ``concurrency`` in flight (new ones are admitted as others
  finish); ``shared_prefix`` tokens of one common system prompt precede each prompt;
- ``kind = "conversation"``: one conversation of ``turns`` turns; each turn's prompt is the whole conversation so
  far plus ``prompt_tokens`` new user tokens, and each turn resumes from the previous turn's kept K/V
  (``app.workloads.conversations``).

Phase values may name a parameter as ``"$name"``. Pure Python (tomllib): the TUI lists scenarios without mlx.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

SCENARIO_DIR = Path(__file__).resolve().parents[2] / "assets" / "scenarios"
DEFAULT_SCENARIO = "churn"
PHASE_KINDS = ("idle", "requests", "conversation")


class ScenarioError(ValueError):
    """A scenario that does not exist or does not make sense; the message is one line for the user."""


@dataclass(frozen=True)
class Phase:
    name: str
    kind: str
    seconds: float = 0.0
    count: int = 0
    concurrency: int = 1
    prompt_tokens: tuple[int, int] = (0, 0)
    gen_tokens: tuple[int, int] = (1, 1)
    shared_prefix: int = 0
    turns: int = 0


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    params: dict
    pool: dict
    phases: tuple[Phase, ...] = field(default_factory=tuple)

    @property
    def num_requests(self) -> int:
        return sum(p.count if p.kind == "requests" else p.turns for p in self.phases)


def list_scenarios(directory: Path = SCENARIO_DIR) -> list[tuple[str, str]]:
    """(name, description) of every scenario file, sorted by name."""
    out = []
    for path in sorted(directory.glob("*.toml")):
        with path.open("rb") as fh:
            out.append((path.stem, str(tomllib.load(fh).get("description", ""))))
    return out


def parse_overrides(items: list[str] | None) -> dict:
    """``["n=4", "gen_tokens=8"]`` -> ``{"n": 4, ...}``; values parsed as TOML scalars (ints, floats, strings)."""
    out = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ScenarioError(f"--set expects key=value, got {item!r}")
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        out[key.strip()] = value
    return out


def load_scenario(name: str, overrides: dict | None = None, directory: Path = SCENARIO_DIR) -> Scenario:
    """Read ``<directory>/<name>.toml`` (or ``name`` itself if it is a path ending in .toml), apply ``overrides`` to its params and resolve its phases."""
    path = Path(name) if name.endswith(".toml") else directory / f"{name}.toml"
    if not name or (not name.endswith(".toml") and "/" in name) or not path.is_file():
        known = ", ".join(n for n, _ in list_scenarios(directory))
        raise ScenarioError(f"unknown scenario {name!r} (known: {known})")
    with path.open("rb") as fh:
        data = tomllib.load(fh)
    params = dict(data.get("params", {}))
    for key, value in (overrides or {}).items():
        if key not in params:
            raise ScenarioError(f"scenario {name!r} has no parameter {key!r} (has: {', '.join(params)})")
        params[key] = value
    phases = tuple(_phase(name, raw, params) for raw in data.get("phases", []))
    if not phases:
        raise ScenarioError(f"scenario {name!r} defines no phases")
    return Scenario(path.stem, str(data.get("description", "")), params, dict(data.get("pool", {})), phases)


def _resolve(value, params: dict, where: str):
    if isinstance(value, str) and value.startswith("$"):
        if value[1:] not in params:
            raise ScenarioError(f"{where}: unknown parameter {value}")
        return params[value[1:]]
    if isinstance(value, list):
        return [_resolve(v, params, where) for v in value]
    return value


def _int_range(value, where: str, minimum: int) -> tuple[int, int]:
    lo, hi = (value, value) if not isinstance(value, list) else (value[0], value[-1])
    if not isinstance(lo, int) or not isinstance(hi, int) or lo < minimum or hi < lo:
        raise ScenarioError(f"{where}: expected an int >= {minimum} or [min, max], got {value!r}")
    return lo, hi


def _phase(scenario: str, raw: dict, params: dict) -> Phase:
    name = str(raw.get("name", ""))
    where = f"scenario {scenario!r} phase {name!r}"
    kind = raw.get("kind", "requests")
    if kind not in PHASE_KINDS or not name:
        raise ScenarioError(f"{where}: needs a name and kind in {PHASE_KINDS}")
    get = {k: _resolve(v, params, where) for k, v in raw.items()}
    if kind == "idle":
        seconds = float(get.get("seconds", 0))
        if seconds < 0:
            raise ScenarioError(f"{where}: seconds must be >= 0")
        return Phase(name, kind, seconds=seconds)
    count = int(get.get("count", 0))
    turns = int(get.get("turns", 0))
    concurrency = int(get.get("concurrency", 1))
    if kind == "requests" and count < 1 or kind == "conversation" and turns < 1 or concurrency < 1:
        raise ScenarioError(f"{where}: count/turns and concurrency must be >= 1")
    shared = int(get.get("shared_prefix", 0))
    if shared < 0:
        raise ScenarioError(f"{where}: shared_prefix must be >= 0")
    return Phase(name, kind, count=count, turns=turns, concurrency=concurrency, shared_prefix=shared,
                 prompt_tokens=_int_range(get.get("prompt_tokens", 1), f"{where} prompt_tokens", 1),
                 gen_tokens=_int_range(get.get("gen_tokens", 1), f"{where} gen_tokens", 1))
