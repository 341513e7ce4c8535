"""Benchmark implementations behind ``slabscope bench ...`` (the commands live in ``app/commands/bench_*.py``), and
``device/``: the scripts run on the GPU machine (see its README)."""
