"""Benchmark implementations behind ``slabscope bench ...`` (the commands live in ``app/commands/bench_*.py``, one
module per kind). Device and diagnosis scripts are not here: they live in the top-level ``lab/``."""
