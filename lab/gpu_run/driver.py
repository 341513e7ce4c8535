"""Runs the steps of a device call, each in its own process (MLX's memory counters are per process), and keeps every
step's JSON or error even when another step fails (``halves.py`` uses it).

    driver = Driver(out, name="a"); driver.step("bench_growth", [...argv...], timeout_s)
"""

from __future__ import annotations

import json
import os
import subprocess
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))  # lab/gpu_run/..


class Driver:
    """Runs steps (each its own process), keeping every step's JSON or error in ``OUT/<name>.json`` and its output
    in ``OUT/<name>.log``."""

    def __init__(self, out: str, name: str):
        self.out, self.name = out, name
        self.results: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"),
                              "fused_switch": os.environ.get("SLABSCOPE_PAGED_ATTENTION_NATIVE")}
        self.log = open(os.path.join(out, f"{name}.log"), "a")

    def step(self, name: str, argv: list[str], timeout: float, parse_json: bool = True,
             extra_env: dict | None = None, keep_stdout: bool = False) -> dict | None:
        """Run ``argv`` from the repo root (with ``extra_env``); keep its JSON (last JSON value on stdout) or its
        error (``keep_stdout``: also the end of its output, for text reports). Returns the JSON, or None."""
        start = time.perf_counter()
        self.log.write(f"\n=== {name}: {' '.join(argv)} {extra_env or ''}\n")
        self.log.flush()
        env = dict(os.environ, PYTHONPATH=REPO, PYTHONUNBUFFERED="1", **(extra_env or {}))
        try:
            done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            self.results[name] = {"error": f"timed out after {timeout} s", "stderr_tail": str(exc.stderr)[-2000:]}
            self.save()
            return None
        wall = time.perf_counter() - start
        self.log.write(done.stdout[-20000:] + "\n--- stderr ---\n" + done.stderr[-20000:] + "\n")
        self.log.flush()
        entry: dict = {"exit": done.returncode, "wall_s": round(wall, 2), "env": extra_env or {}}
        if keep_stdout:
            entry["stdout_tail"] = done.stdout[-6000:]
        if parse_json:
            try:
                entry["json"] = _last_json(done.stdout)
            except ValueError:
                entry["error"] = "no JSON on stdout"
        if done.returncode not in (0, 1) or "error" in entry:
            entry["stderr_tail"] = done.stderr[-3000:]
        self.results[name] = entry
        self.save()
        print(f"[{time.strftime('%H:%M:%S')}] {name}: exit {done.returncode} in {wall:.1f} s", flush=True)
        return entry.get("json")

    def save(self) -> None:
        with open(os.path.join(self.out, f"{self.name}.json"), "w") as f:
            json.dump(self.results, f, indent=1, default=str)


def _last_json(stdout: str):
    """The last JSON value printed: a whole-output JSON document, else the last line that parses."""
    text = stdout.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    for line in reversed(text.splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    raise ValueError("no JSON")
