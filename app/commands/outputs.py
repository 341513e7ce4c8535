"""What every command that writes a recording shares: ``--force``, claiming the recording paths before a run
starts, and reading from a run's summary whether its recording holds the whole run (mlx-free, import-light).

A live recording has one writer (``probes.outfile``): ``record`` and ``run --record`` claim every path they will
record to before any work starts (a second command into the same path refuses with one line, exit 1, before
loading anything), hand the claim to the process that writes the records (``RunSpec.record_claim``), and release
it when the run ends. A recording that stopped with an error (a full disk, a file-size limit) makes the command
exit 1 with one line, through ``recording_problem``, the same in both commands.
"""

from __future__ import annotations

import os
from typing import Iterable


def add_force_argument(parser, what: str) -> None:
    parser.add_argument("--force", action="store_true",
                        help=f"replace {what} when it exists (never a command's own input, nor a recording "
                             "another process is writing); without it an existing file is refused")


def claim_recordings(paths: Iterable[str], force: bool, inputs: Iterable[str] = ()) -> list:
    """One ``probes.outfile.Claim`` per path, in order; all or none: on the first refusal the claims already taken
    are released and the refusal (``OutputError``, one line) propagates."""
    from probes.outfile import claim

    claims: list = []
    try:
        for path in paths:
            claims.append(claim(path, force=force, inputs=list(inputs)))
    except BaseException:
        release_all(claims)
        raise
    return claims


def release_all(claims: Iterable) -> None:
    """Release every claim (a still-empty claimed file is removed: its run never recorded)."""
    for held in claims:
        held.release()


def scenario_inputs(scenario: str | None) -> list[str]:
    """The files a run reads that a recording path must not name (its scenario file, when it is one)."""
    return [scenario] if scenario and os.path.isfile(scenario) else []


def recording_problem(summary: dict | None) -> str | None:
    """Why a run's recording does not hold the whole run (the error that stopped it), or None when it does (or
    the run recorded nothing). Read from the summary's ``recording`` block (``probes.live.WorkerProbes``)."""
    block = (summary or {}).get("recording")
    if isinstance(block, dict) and block.get("error"):
        return str(block["error"])
    return None
