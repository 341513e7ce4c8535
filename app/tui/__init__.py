"""slabscope's Textual dashboard.

The TUI process never imports mlx or mlx_lm: every MLX computation runs in worker processes (``app.workloads``),
whose events reach this package through one ingest thread (``app.tui.ingest``) into an in-memory store
(``app.tui.data``). Recordings are read through the same store, so every view works on live runs and replays alike.
"""
