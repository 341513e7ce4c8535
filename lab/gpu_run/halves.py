"""One half of the GPU run (``run.sh`` runs the warm-up, then both halves in parallel, one per GPU).

Every step runs in its own process (MLX's memory counters are per process) through ``driver.Driver``: its JSON or
its error is kept in ``OUT/<half>.json`` even when another step fails, its output in ``OUT/<half>.log``; a step never
starts after ``--deadline-s`` and never runs past it. Steps run most important first.

* ``warm``: device and versions; a small run of dense and slab (MLX's own kernels JIT-compile into MLX's cache);
  ``slabscope warmup`` for the burst and decode-heavy workloads (the fused kernels into our cubin cache), so every
  later run counts as a warm-cache run. The cold-cache record below uses a cache of its own.
* ``a`` (recordings): the burst ``record`` of slab, monolithic and dense (the fresh-process table, and the recordings
  shipped in ``assets/recordings/gpu/``), the decode-heavy record, ``tests/gpu`` (the correctness table), ``bench
  growth`` at full size, the burst with the prefill trim off / 0.02 / 0.10 (the default, 0.05, is the first record),
  and a record from an empty kernel cache (a machine's first run).
* ``b`` (benches): ``bench throughput`` on the burst and on the decode-heavy workload beside mlx-lm (5 interleaved
  rounds, one fresh process per engine), ``bench probes`` on/off at 100 and 10 Hz, ``bench host`` on the burst.

    OUT=/tmp/out/a python3 -m lab.gpu_run.halves --half a [--small] [--deadline-s 430]

``--small`` shrinks every size to a CPU dry run (a tiny model, fp32): the same steps, the same outputs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from lab.gpu_run.driver import Driver


def sizes(small: bool) -> dict:
    """Model, workloads and bench sizes: the H200's, or a CPU dry run's."""
    if small:
        return {"model": "synthetic:tiny-qwen3", "dtype": "float32", "device": "cpu",
                "burst": (2, 256, 4), "heavy": (3, 128, 8), "warm": (2, 64, 2), "rounds": 1, "reps": 1,
                "growth": ["--layers", "2", "--prefills", "2", "--tokens", "256", "--dtype", "float32"],
                # the tiny model's head_dim has no kernel: build a supported geometry with NVRTC, for sm_90
                "kernels": ["--head-dim", "64", "--q-heads", "4", "--kv-heads", "2", "--dtype", "float16", "--sm",
                            "90"]}
    return {"model": "synthetic:qwen3-0.6b", "dtype": "bfloat16", "device": "gpu",
            "burst": (8, 4096, 32), "heavy": (16, 2048, 256), "warm": (2, 512, 4), "rounds": 5, "reps": 5,
            "growth": ["--layers", "28", "--kv-heads", "8", "--head-dim", "128", "--prefills", "8", "--tokens",
                       "4096", "--dtype", "bfloat16"], "kernels": ["--model", "synthetic:qwen3-0.6b"]}


def workload(s: dict, which: str) -> list[str]:
    n, prompt, gen = s[which]
    return ["--scenario", "distinct_burst", "--set", f"n={n}", "--set", f"prompt_tokens={prompt}", "--set",
            f"gen_tokens={gen}", "--model", s["model"]]


def steps(half: str, s: dict, out: str) -> list[tuple]:
    """(name, argv, timeout s, options) of one half, most important first."""
    py = [sys.executable, "-m", "app"]
    target = ["--dtype", s["dtype"], "--device", s["device"]]
    burst, heavy, warm = workload(s, "burst"), workload(s, "heavy"), workload(s, "warm")
    probes = ["--sample-hz", "100", "--snapshot-hz", "0.5"]

    def record(name: str, args: list[str], backends: str, *extra: str) -> tuple:
        return (name, [*py, "record", *args, *target, "--backends", backends, "--out", os.path.join(out, name),
                       *probes, *extra], 300, {"parse_json": False, "keep_stdout": True})

    if half == "warm":
        return [
            ("env", [sys.executable, "-c", "import json, mlx.core as mx, mlx_lm; print(json.dumps({'mlx': "
                     "mx.__version__, 'mlx_lm': mlx_lm.__version__, 'device': str(mx.default_device()), 'info': "
                     "mx.device_info()}))"], 60, {}),
            ("warm_dense", [*py, "run", "--backend", "dense", "--json", *warm, *target], 180, {}),
            ("warm_slab", [*py, "run", "--backend", "slab", "--json", *warm, *target], 180, {}),
            ("kernels_burst", [*py, "warmup", *s["kernels"], *burst[:-2], "--json"], 120, {}),
            ("kernels_heavy", [*py, "warmup", *s["kernels"], *heavy[:-2], "--json"], 120, {}),
        ]
    if half == "a":
        return [
            record("rec_burst", burst, "slab,monolithic,dense"),
            record("rec_heavy", heavy, "slab,dense"),
            ("gpu_tests", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu"], 300,
             {"parse_json": False, "keep_stdout": True,
              "extra_env": {"SLABSCOPE_GPU_REPORT": os.path.join(out, "correctness.jsonl")}}),
            ("bench_growth", [*py, "bench", "growth", *s["growth"], "--json"], 240, {}),
            record("rec_trim_off", burst, "slab,dense", "--prefill-trim", "off"),
            record("rec_trim_0.02", burst, "slab,dense", "--prefill-trim", "0.02"),
            record("rec_trim_0.10", burst, "slab,dense", "--prefill-trim", "0.10"),
            (*record("rec_cold", burst, "slab,dense")[:3],
             {"parse_json": False, "keep_stdout": True,
              "extra_env": {"SLABSCOPE_KERNEL_CACHE": tempfile.mkdtemp(prefix="slabscope-cold-")}}),
        ]
    if half == "b":
        fresh = int(os.environ.get("FRESH_ROUNDS", "1"))  # fresh processes per engine in bench throughput
        rounds = ["--rounds", str(s["rounds"]), "--fresh-rounds", str(fresh), "--json"]
        limit = 270 + 60 * fresh
        return [
            ("throughput_burst", [*py, "bench", "throughput", *burst, *target, "--engines", "dense,slab,mlx_lm",
                                  *rounds], limit, {}),
            ("throughput_heavy", [*py, "bench", "throughput", *heavy, *target, "--engines", "dense,slab,mlx_lm",
                                  *rounds], limit, {}),
            *[(f"probes_{hz}hz", [*py, "bench", "probes", *burst, "--backend", "slab", "--reps", str(s["reps"]),
                                  "--sample-hz", str(hz), "--snapshot-hz", "0.5"], 240,
               {"parse_json": False, "keep_stdout": True}) for hz in (100, 10)],
            ("bench_host", [*py, "bench", "host", *burst, *target, "--json"], 240, {}),
            # 128-block slabs: 9 slabs per layer instead of 33, so the fused kernel takes a quarter of the slab inputs
            # (does the decode step's host time follow the kernel's input count?)
            ("bench_host_slab128", [*py, "bench", "host", *burst, *target, "--slab-blocks", "128", "--json"], 240,
             {}),
        ]
    raise ValueError(f"unknown half {half!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", required=True, choices=("warm", "a", "b"))
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    parser.add_argument("--small", action="store_true", help="tiny sizes on the CPU (dry run)")
    parser.add_argument("--deadline-s", type=float, default=430.0,
                        help="start no step after this many seconds; no step runs past it")
    parser.add_argument("--only", default="", help="comma list: run only these steps (a recheck); a step of the "
                        "other half runs in this one")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    driver = Driver(args.out, name=args.half)
    begin = time.perf_counter()
    only = {name for name in args.only.split(",") if name}
    mine = steps(args.half, sizes(args.small), args.out)
    # --only may also name a step of the other half (to balance a recheck across the two GPUs)
    other = [] if args.half == "warm" else steps("b" if args.half == "a" else "a", sizes(args.small), args.out)
    chosen = [step for step in mine + other if step[0] in only] if only else mine
    if only - {step[0] for step in chosen}:
        parser.error(f"no such step in half {args.half}: {', '.join(sorted(only - {s[0] for s in chosen}))}")
    for name, argv, timeout, options in chosen:
        left = args.deadline_s - (time.perf_counter() - begin)
        if left < 20:
            driver.results[name] = {"error": f"not run: the {args.deadline_s:.0f} s deadline was reached"}
            continue
        driver.step(name, argv, min(timeout, left), **options)
    driver.results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    driver.results["wall_s"] = round(time.perf_counter() - begin, 1)
    driver.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
