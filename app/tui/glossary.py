"""The user's vocabulary: every figure and word the dashboard shows, defined once, grouped by the view that shows it.

The glossary screen (``g`` anywhere, ``g`` in the help screen, the "g glossary" link in every view's legend) and the
README's "Glossary" section both come from ``TOPICS``; ``python -m app.tui.glossary`` prints the README's text, and
``tests/tui/test_guide.py`` fails when the README differs from it.
"""

from __future__ import annotations

import sys

# (topic id, title, [(term, definition)]); topic ids are the tab ids of the views (app.tui.keys.TAB_KEYS).
TOPICS: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("memory", "Memory (the first screen) and the status bar", [
        ("footprint, max(act+cache)", "the largest MLX active + MLX cache memory among the memory samples: what the "
         "process holds for MLX. MLX's own peak counter counts active memory only and misses the buffers MLX keeps "
         "in its cache. Sampled: a peak shorter than the time between two samples can be missed."),
        ("whole run / so far", "the verdict line: each session's footprint over its whole run (a live run: so far) "
         "divided by the dense session's, against the gate, and its tok/s: the figures `slabscope compare` prints "
         "in its `all` rows."),
        ("at cursor", "the same figures from each session's start up to the cursor (the scrubber's position). A "
         "peak up to an instant is not a verdict: no gate is applied, and it is drawn in grey."),
        ("x dense, footprint ratio", "a session's footprint divided by the dense baseline's (mlx-lm's own KV "
         "caches). Below 1.00x: it held less memory at its peak."),
        ("gate", "the footprint ratio you accept (`--gate`, default 1.15x, also on the run form): `ok` at or "
         "below it, `EXCEEDED` (red) above it. Only the whole-run ratio is gated."),
        ("busy tok/s", "tokens of every forward pass (prompt and generated) divided by those steps' own wall "
         "seconds (idle time between requests does not dilute it): `compare`'s busy tok/s column and `run`'s "
         "\"tok/s busy\"."),
        ("prefill tok/s, decode tok/s", "prompt tokens over the prefill steps' time, generated tokens over the "
         "decode steps' time (mlx-lm's \"Prompt\" and \"Generation\" figures)."),
        ("RSS", "resident set size of the worker process as the OS counts it (host memory; on a unified-memory "
         "machine it includes what MLX holds)."),
        ("weights / pool live / pool reserved-free", "accounting bar: the model's parameters; the pool's rows "
         "holding K/V of a sequence; the pool's rows reserved but free."),
        ("other active", "MLX active memory left after weights and pool: activations, temporaries. When the "
         "bookkeeping counts more than MLX holds (slabs booked but not allocated yet), it is drawn as 0 and the "
         "excess is said in words: memory is never drawn negative."),
        ("MLX cache", "freed buffers MLX keeps for reuse; the process still holds them (the slab pool exists so "
         "they do not pile up)."),
        ("unexplained RSS / host RSS", "grey: RSS that MLX's figures do not explain (unified memory), or on a "
         "discrete GPU the host process's RSS, which is not GPU memory. Shown as such, not as an error."),
        ("▲ peak, ✓ finished, ↓ shrink", "lanes under the chart: when a session's footprint peaked, when its "
         "requests finished, when a shrink point gave memory back."),
        ("status: stage, requests k/N, ETA", "where a live run is: starting, loading model, rehearsal (GPU), the "
         "phase, requests finished of the scenario's total, tokens so far, and an estimate (`ETA ~`) from the time "
         "per finished request; then done, stopped (you pressed x) or failed."),
        ("probes %", "the probes' own measured cost: their thread's CPU time plus the workload's time inside them, "
         "as a share of wall time."),
        ("dropped", "event batches the worker could not hand to the dashboard (its queue was full; red); the "
         "recording on disk has every event."),
    ]),
    ("slabs", "Slabs", [
        ("slab", "one fixed-size K/V tensor of a layer holding `slab blocks` blocks; a layer's storage is a list "
         "of slabs, and growth appends one (nothing is copied). Monolithic pools have one tensor per layer; their "
         "cells are its grow chunks."),
        ("block", "`block size` tokens of one sequence's K/V: the unit a sequence grows by."),
        ("row (rows vs blocks)", "a physical slot in a layer's storage holding one block; a sequence's block table "
         "maps its logical blocks to rows. Rows are the pool's, blocks the sequence's."),
        ("live", "rows owned by exactly one running sequence."),
        ("shared", "rows referenced by more than one owner (refcount > 1): a prefix shared between requests, or a "
         "conversation's kept block before copy-on-write. Marked `s`."),
        ("held", "rows kept only by a prefix handle (a cached prefix no running sequence uses now). Marked `h`."),
        ("caller", "rows held by the caller: restored, not yet adopted by a sequence. Marked `c`."),
        ("free", "rows nobody holds, reused before new rows are minted."),
        ("reserved / in use", "bytes of every slab the pool holds / bytes of the rows holding K/V now."),
        ("empty→full ramp", "a cell's fill: grey when empty, a stronger blue as rows fill. A full slab is memory "
         "well used, not a warning."),
        ("shrink released / moved", "what shrink points gave back: slabs released (and their bytes) and live "
         "blocks moved down to empty the highest slabs (`--shrink compact`)."),
    ]),
    ("frag", "Fragmentation", [
        ("free rows", "rows of the layer nobody holds."),
        ("holes", "maximal runs of consecutive free rows."),
        ("largest run", "the longest run of consecutive free rows; amber when shorter than the next request's need."),
        ("need", "blocks the next request needs (the scenario's announced size, else the longest live sequence's)."),
        ("frag idx", "fragmentation index: 1 - largest free run / free rows. 0: all free rows are one run; near 1: "
         "free rows scattered in small holes."),
        ("trend", "the index over the last snapshots up to the cursor."),
    ]),
    ("gather", "Gather", [
        ("gather", "reading a sequence's K/V rows for attention on the gather path (rows copied together, then "
         "attention)."),
        ("runs", "a sequence's rows split into maximal runs that lie in one slab: one run is one contiguous read. "
         "More runs, more pieces to read."),
        ("gather runs mean/max", "for every decode step and every sequence it advanced, the runs its attention "
         "walked (the most over layers); the histogram `runs per sequence per decode step`, its mean and maximum: "
         "`compare`'s column of that name."),
        ("runs per sequence now", "runs each live sequence's next gather takes at the cursor; the most is marked "
         "`◀ worst` (bold: the extreme, not an error)."),
        ("max run lane", "the worst sequence's runs per decode step over the run (its worst is the histogram's "
         "largest bar)."),
    ]),
    ("fused", "Fused", [
        ("fused kernel", "slabscope's paged decode attention kernel: reads K/V from the slabs in place."),
        ("gather path", "the fallback: gather rows, then the framework's attention. Chosen per layer and decode "
         "step; drawn in grey: a choice by design, not a failure."),
        ("decision, reason", "per layer, fused or gather and the first reason that applied (no GPU kernel backend, "
         "dtype, batch, context below the measured break-even, kernel compiling...)."),
        ("declines", "of the per-layer decisions of the decode steps (one per layer per step), those that took "
         "the gather path, shown as declines/decisions and by reason class; `decline rate` = gather / (fused + "
         "gather) decisions over a window. `-`: no fused-kernel decision in the window."),
    ]),
    ("inspect", "Inspector", [
        ("row map", "one line per slab, one character per row: the owning sequence's id (base 36, in its colour), "
         "`·` free, `◆` shared, `h` held, `c` caller; underlined: written by copy-on-write."),
        ("free run origin", "for a free run: which sequence last held it and the op (release, trim, detach) that "
         "freed it, from the op log."),
    ]),
    ("sessions", "Sessions", [
        ("recordings list", "session files in the folder shown: folders first (`..` goes up), then files, newest "
         "first. Enter opens (a rank recording opens its whole run); m marks, c opens the marked side by side."),
        ("complete / partial / damaged", "a recording with its END record / one whose writer stopped early "
         "(figures cover what it holds) / one read up to a damaged record."),
        ("on screen now", "the sessions on screen compared up to the cursor: the same figures as the Memory "
         "view's at-cursor line, plus decode tok/s, slabs, reserved bytes, gather runs mean/max, declines and "
         "probe cost."),
    ]),
    ("ranks", "Ranks", [
        ("rank", "one process of a tensor-parallel run (`--ranks N`), recorded in a file of its own; `w` picks the "
         "rank the pool views show."),
        ("aligned clock", "every rank's times on rank 0's clock, from offsets measured at sync points (within the "
         "bound shown)."),
        ("imbalance", "the largest rank footprint over the smallest, per phase."),
    ]),
]


def topic_ids() -> list[str]:
    return [topic for topic, _, _ in TOPICS]


def markdown() -> str:
    """The README's "Glossary" section body: one table per topic."""
    out = []
    for _topic, title, terms in TOPICS:
        out.append(f"**{title}**\n\n| term | meaning |\n|---|---|")
        out += [f"| {term} | {meaning} |" for term, meaning in terms]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
