"""Every bound on what a workload may ask for, by name, and the checks that apply them before work starts.

Plain Python (no mlx): the CLI and the TUI check a scenario before any worker starts; the session checks it again
against the loaded model (``check_fits_context``) before the first phase. A value past a bound is a
:class:`WorkloadLimitError` naming the bound, never a run that eats memory or time until it is killed. The pool's
allocation sizes are bounded separately, against the device (``pool/limits.py``).

The bounds are far above every bundled scenario and every run in docs/ (the largest: 8 requests of 4096-token
prompts on the H200), and low enough that a typo (``n=10**12``) is refused instead of running for days.
"""

from __future__ import annotations

import math

MAX_PHASE_REQUESTS = 100_000        # requests (or conversation turns) of one phase
MAX_CONCURRENCY = 4_096             # sequences in flight at once
MAX_REQUEST_TOKENS = 1 << 20        # prompt or generated tokens of one request (the model's context is checked too)
MAX_PHASE_PROMPT_TOKENS = 1 << 23   # prompt tokens a phase builds up front (its requests are token-id lists)
MAX_IDLE_SECONDS = 86_400.0         # one idle phase
MAX_PHASES = 1_000                  # phases of one scenario
MAX_SAMPLE_HZ = 1_000.0             # memory samples / pool snapshots per second


class ScenarioError(ValueError):
    """A scenario that does not exist or does not make sense; the message is one line for the user."""


class WorkloadLimitError(ScenarioError):
    """A workload asks for more than a named bound allows (or than the model's context holds)."""


def check_count(value, name: str, where: str, minimum: int, maximum: int) -> int:
    """``value`` as an int in ``[minimum, maximum]``: a real int (not a bool, a float like 1.5 or 1e12, or a
    string), else WorkloadLimitError naming ``where`` and the bound."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise WorkloadLimitError(f"{where}: {name} must be a whole number, got {value!r}")
    if value < minimum:
        raise WorkloadLimitError(f"{where}: {name} must be >= {minimum}, got {value}")
    if value > maximum:
        raise WorkloadLimitError(f"{where}: {name} {value:,} exceeds the limit {maximum:,}")
    return value


def check_seconds(value, where: str) -> float:
    """A finite number of seconds in ``[0, MAX_IDLE_SECONDS]`` (inf and NaN would idle forever or never)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise WorkloadLimitError(f"{where}: seconds must be a number, got {value!r}")
    if not 0 <= value <= MAX_IDLE_SECONDS:
        raise WorkloadLimitError(f"{where}: seconds must be in [0, {MAX_IDLE_SECONDS:,.0f}], got {value}")
    return float(value)


def check_rate(value, name: str) -> float:
    """A sampling rate in Hz: finite, in ``[0, MAX_SAMPLE_HZ]`` (0 turns it off)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_SAMPLE_HZ:
        raise WorkloadLimitError(f"{name} must be a number in [0, {MAX_SAMPLE_HZ:,.0f}] Hz, got {value!r}")
    return float(value)


def check_phase_prompt_tokens(count: int, shared_prefix: int, prompt_max: int, where: str) -> None:
    """The prompt tokens a requests phase materialises up front: ``count * (shared_prefix + prompt_max)``."""
    total = count * (shared_prefix + prompt_max)
    if total > MAX_PHASE_PROMPT_TOKENS:
        raise WorkloadLimitError(f"{where}: {count:,} requests of up to {shared_prefix + prompt_max:,} prompt tokens "
                                 f"hold {total:,} tokens, over the limit {MAX_PHASE_PROMPT_TOKENS:,}")


def longest_sequence(phase) -> int:
    """Tokens of the longest sequence a phase can produce (prompt + generated; a conversation's last turn holds
    every earlier turn's user and generated tokens)."""
    if phase.kind == "requests":
        return phase.shared_prefix + phase.prompt_tokens[1] + phase.gen_tokens[1]
    if phase.kind == "conversation":
        return phase.turns * (phase.prompt_tokens[1] + phase.gen_tokens[1])
    return 0


def check_fits_context(scenario, max_positions: int | None, model: str) -> None:
    """WorkloadLimitError when a phase's longest sequence exceeds the model's positions (decoding past them
    reads position embeddings the model was never trained on, or none at all). No-op when unknown."""
    if not max_positions:
        return
    for phase in scenario.phases:
        longest = longest_sequence(phase)
        if longest > max_positions:
            raise WorkloadLimitError(
                f"scenario {scenario.name!r} phase {phase.name!r}: sequences of up to {longest:,} tokens (prompt + "
                f"generated) exceed {model}'s {max_positions:,} positions")


def check_request_fits(prompt_tokens: int, max_new_tokens: int, max_positions: int | None, model: str) -> None:
    """One request (``slabscope generate``): prompt + generated tokens within the model's positions."""
    if max_positions and prompt_tokens + max_new_tokens > max_positions:
        raise WorkloadLimitError(f"{prompt_tokens:,} prompt tokens + {max_new_tokens:,} to generate exceed "
                                 f"{model}'s {max_positions:,} positions")
