"""Device session B driver: the issue's full-size GPU runs in one command, each step in its own process (MLX's
memory counters are per process), every step's output kept even when another fails.

Steps: warm-up (fills MLX's PTX cache so no measured run pays the JIT), ``bench growth`` at the issue's full size,
the footprint gate (``slabscope record`` of distinct_burst on slab / monolithic / dense, then ``compare --json``),
throughput without probes (``slabscope run --json`` on dense and slab, and slab with the fused kernel switched off
by ``SLABSCOPE_PAGED_ATTENTION_NATIVE=0``) and mlx-lm's own BatchGenerator on the same prompts. Writes ``OUT/session_b.json`` (every step's JSON or error), ``OUT/session_b.log`` and the recordings under
``OUT/rec/`` (at most 8 files in all). ``--small`` shrinks every size for a dry run on a CPU.

    OUT=/tmp/out python app/bench/device/session_b.py [--small]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # app/bench/device/..


def sizes(small: bool) -> dict:
    if small:
        return {"model": "synthetic:tiny-qwen3", "dtype": "float32", "device": "cpu", "n": 2, "prompt": 256,
                "gen": 4, "growth": ["--layers", "2", "--prefills", "2", "--tokens", "256", "--dtype", "float32"]}
    return {"model": "synthetic:qwen3-0.6b", "dtype": "bfloat16", "device": "gpu", "n": 8, "prompt": 4096,
            "gen": 32, "growth": ["--layers", "28", "--kv-heads", "8", "--head-dim", "128", "--prefills", "8",
                                  "--tokens", "4096", "--dtype", "bfloat16"]}


class Driver:
    """Runs steps (each its own process), keeping every step's JSON or error in ``OUT/<name>.json`` and its output
    in ``OUT/<name>.log``."""

    def __init__(self, out: str, name: str = "session_b"):
        self.out, self.name = out, name
        knobs = ("SLABSCOPE_CUDA_UNROLL", "SLABSCOPE_DECODE_TARGET_BLOCKS", "SLABSCOPE_PAGED_ATTENTION_NATIVE")
        self.results: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"),
                              "kernel_env": {k: os.environ.get(k) for k in knobs}}
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
            self._save()
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
        self._save()
        print(f"[{time.strftime('%H:%M:%S')}] {name}: exit {done.returncode} in {wall:.1f} s", flush=True)
        return entry.get("json")

    def _save(self) -> None:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="tiny sizes on the CPU (dry run)")
    parser.add_argument("--skip", default="", help="comma-separated step names to skip")
    parser.add_argument("--only", default="", help="comma-separated step names to run (default: all)")
    parser.add_argument("--deadline-s", type=float, default=540.0,
                        help="stop starting steps after this many seconds; a step never runs past it")
    args = parser.parse_args()
    out = os.environ.get("OUT", "/tmp/out")
    os.makedirs(os.path.join(out, "rec"), exist_ok=True)
    s = sizes(args.small)
    skip = set(filter(None, args.skip.split(",")))
    only = set(filter(None, args.only.split(",")))
    py = sys.executable
    workload = ["--scenario", "distinct_burst", "--set", f"n={s['n']}", "--set", f"prompt_tokens={s['prompt']}",
                "--set", f"gen_tokens={s['gen']}", "--model", s["model"], "--dtype", s["dtype"],
                "--device", s["device"]]
    warm = ["--scenario", "distinct_burst", "--set", "n=2", "--set", "prompt_tokens=512", "--set", "gen_tokens=4",
            "--model", s["model"], "--dtype", s["dtype"], "--device", s["device"]]
    d = Driver(out)
    steps = [
        ("env", [py, "-c", "import json, mlx.core as mx, mlx_lm; print(json.dumps({'mlx': mx.__version__, "
                 "'mlx_lm': mlx_lm.__version__, 'device': str(mx.default_device()), 'info': mx.device_info()}))"], 60),
        ("warmup_dense", [py, "-m", "app", "run", "--backend", "dense", "--json", *warm], 240),
        ("warmup_slab", [py, "-m", "app", "run", "--backend", "slab", "--json", *warm], 240),
        ("bench_growth", [py, "-m", "app", "bench", "growth", *s["growth"], "--json"], 420),
        ("record", [py, "-m", "app", "record", *workload, "--backends", "slab,monolithic,dense", "--out",
                    os.path.join(out, "rec"), "--sample-hz", "100", "--snapshot-hz", "0.5"], 480),
        ("compare", [py, "-m", "app", "compare", "--json", os.path.join(out, "rec")], 120),
        ("run_dense", [py, "-m", "app", "run", "--backend", "dense", "--json", *workload], 300),
        ("run_slab", [py, "-m", "app", "run", "--backend", "slab", "--json", *workload], 300),
        ("mlxlm_batchgenerator", [py, "-m", "app", "bench", "throughput", "--engines", "mlx_lm",
                                  "--rounds", "1", "--fresh-rounds", "0", "--json", *workload], 300),
        ("run_slab_gather", [py, "-m", "app", "run", "--backend", "slab", "--json", *workload], 300,
         {"SLABSCOPE_PAGED_ATTENTION_NATIVE": "0"}),
    ]
    begin = time.perf_counter()
    for name, argv, timeout, *extra in steps:
        if name in skip or (only and name not in only):
            continue
        left = args.deadline_s - (time.perf_counter() - begin)
        if left < 20:
            d.results[name] = {"error": f"not run: the {args.deadline_s:.0f} s deadline was reached"}
            continue
        d.step(name, argv, min(timeout, left), parse_json=name != "record", extra_env=extra[0] if extra else None)
        if name == "record" and d.results[name].get("exit") not in (0, None):
            # a failed recording must not cost the gate: record again on the gather path, labelled as such
            d.step("record_gather", argv, max(20.0, args.deadline_s - (time.perf_counter() - begin)),
                   parse_json=False, extra_env={"SLABSCOPE_PAGED_ATTENTION_NATIVE": "0"})
    d.results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    d._save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
