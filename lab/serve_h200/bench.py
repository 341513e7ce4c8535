"""``slabscope load`` against ``slabscope serve --backend slab``, ``--backend dense`` and stock ``mlx_lm.server`` on the
same model directory and the same scenarios, fresh server processes, interleaved rounds (issue 28's H200 figures).

For every round, scenario and server (the servers' order rotates each round): a fresh server on a free loopback
port, a two-request warm-up (its first uses of the device stay out of the figures), then ``slabscope load --json``
with the scenario, then SIGTERM. Measured per run: output and total tok/s, TTFT and TPOT p50/p99 (``load``), the
peak footprint max(MLX active + cache) of the process that runs the model (slabscope: its engine's probes, read
from its recording; mlx_lm.server: the same sampler in its process, ``mlx_lm_probed.py``), the peak RSS of the
server's whole process tree (sampled here at 20 Hz), on a GPU also the device memory nvidia-smi gives its
processes, and ``load``'s verdict (a server that ran out of memory is a result, not an error of this script).
Reported per scenario and server: the median and the range over rounds. ``$OUT/serve_h200.json`` holds every run.

    OUT=/tmp/out python3 -m lab.serve_h200.bench             # the H200 run (about 6 minutes)
    OUT=/tmp/out python3 -m lab.serve_h200.bench --small     # a CPU dry run on a tiny model (about 4 minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
SERVERS = ("slab", "dense", "mlx_lm.server")
GPU = {"model": "synthetic:qwen3-0.6b", "dtype": "bfloat16", "device": "gpu", "scenarios": {
    "burst": ["--scenario", "distinct_burst", "--set", "n=16", "prompt_tokens=2048", "gen_tokens=128"],
    "ragged": ["--scenario", "churn", "--set", "n=16", "concurrency=16", "prompt_min=1024", "prompt_max=12288",
               "gen_min=32", "gen_max=32"]}}
SMALL = {"model": "synthetic:tiny-qwen3-28l", "dtype": "float32", "device": "cpu", "scenarios": {
    "burst": ["--scenario", "distinct_burst", "--set", "n=4", "prompt_tokens=256", "gen_tokens=32"],
    "ragged": ["--scenario", "churn", "--set", "n=6", "concurrency=6", "prompt_min=64", "prompt_max=768",
               "gen_min=16", "gen_max=16"]}}
WARMUP = ["--scenario", "distinct_burst", "--set", "n=2", "prompt_tokens=256", "gen_tokens=8"]
MIB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        try:
            process.wait(0.2)
        except subprocess.TimeoutExpired:
            pass
    raise RuntimeError(f"server not healthy within {timeout:g} s")


class TreeSampler:
    """Peak RSS of a process and its children (20 Hz), and on a GPU their device memory (nvidia-smi, 2 Hz)."""

    def __init__(self, pid: int, gpu: bool) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self.gpu = gpu and shutil.which("nvidia-smi") is not None
        self.rss_max = 0
        self.device_mib_max = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _pids(self) -> list:
        import psutil

        try:
            return [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return []

    def _run(self) -> None:
        import psutil

        tick = 0
        while not self._stop.wait(0.05):
            rss = 0
            for process in self._pids():
                try:
                    rss += process.memory_info().rss
                except psutil.Error:
                    pass
            self.rss_max = max(self.rss_max, rss)
            tick += 1
            if self.gpu and tick % 10 == 0:
                self.device_mib_max = max(self.device_mib_max, self._device_mib())

    def _device_mib(self) -> int:
        pids = {p.pid for p in self._pids()}
        try:
            out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,"
                                  "nounits"], capture_output=True, text=True, timeout=5).stdout
        except (OSError, subprocess.TimeoutExpired):
            return 0
        used = 0
        for line in out.strip().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[0].isdigit() and int(parts[0]) in pids and parts[1].isdigit():
                used += int(parts[1])
        return used

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)


def start_server(name: str, model_dir: Path, setup: dict, port: int, work: Path, env: dict) -> tuple:
    """(process, url, where its footprint is read) for one fresh server."""
    url = f"http://127.0.0.1:{port}"
    if name == "mlx_lm.server":
        probe = work / f"mlx_lm-{port}.json"
        argv = [PY, "-m", "lab.serve_h200.mlx_lm_probed", "--probe-out", str(probe), "--", "--model",
                str(model_dir), "--host", "127.0.0.1", "--port", str(port)]
    else:
        probe = work / f"rec-{name}-{port}"
        argv = [PY, "-m", "app", "serve", "--model", str(model_dir), "--backend", name, "--port", str(port),
                "--temperature", "0", "--dtype", setup["dtype"], "--device", setup["device"], "--prefill-chunk",
                "2048", "--record",
                str(probe), "--sample-hz", "50", "--snapshot-hz", "1", "--log", str(work / f"engine-{port}.log")]
        if setup["device"] == "cpu":
            argv += ["--blas-threads", "1"]
    log = open(work / f"server-{name}-{port}.log", "wb")
    process = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               env=env, start_new_session=True)
    return process, url, probe


def stop_server(process: subprocess.Popen) -> int | None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
    return process.returncode


def footprint_of(name: str, probe: Path) -> dict:
    """max(active + cache) and RSS max of the process that ran the model (MiB)."""
    if name == "mlx_lm.server":
        try:
            peak = json.loads(probe.read_text())
        except (OSError, ValueError):
            return {}
        return {"footprint_mib": round(peak["footprint_max"] / MIB, 1), "model_rss_mib": round(peak["rss_max"] / MIB, 1),
                "blas": peak.get("blas")}
    from probes.replay import Session

    files = sorted(probe.glob("*.slabrec"))
    if not files:
        return {}
    session = Session.open(files[-1])
    samples = session.samples.window()
    return {"footprint_mib": round(session.peak("footprint").value / MIB, 1),
            "model_rss_mib": round(max(samples.rss, default=0) / MIB, 1), "blas": session.meta.get("blas")}


def run_load(url: str, model_dir: Path, scenario: list[str], out: Path, timeout: float) -> dict:
    argv = [PY, "-m", "app", "load", "--url", url, "--model", str(model_dir), "--tokenizer", str(model_dir),
            "--json", "--out", str(out), "--timeout", str(timeout), *scenario]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout + 60)
    if proc.returncode != 0:
        return {"load_error": proc.stderr.strip()[-500:]}
    return json.loads(out.read_text())


def one_run(name: str, scenario: str, setup: dict, model_dir: Path, work: Path, env: dict, rnd: int) -> dict:
    port = free_port()
    process, url, probe = start_server(name, model_dir, setup, port, work, env)
    sampler = None
    row = {"round": rnd, "scenario": scenario, "server": name}
    try:
        started = time.monotonic()
        wait_healthy(url, process, 180)
        row["start_s"] = round(time.monotonic() - started, 2)
        sampler = TreeSampler(process.pid, setup["device"] == "gpu")
        run_load(url, model_dir, WARMUP, work / f"warm-{name}-{scenario}-{rnd}.json", 120)
        report = run_load(url, model_dir, setup["scenarios"][scenario], work / f"load-{name}-{scenario}-{rnd}.json",
                          300)
        row.update(figures(report))
    except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError) as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if sampler is not None:
            sampler.stop()
            row["tree_rss_mib"] = round(sampler.rss_max / MIB, 1)
            if sampler.gpu:
                row["device_mib"] = sampler.device_mib_max
        row["exit"] = stop_server(process)
        row.update(footprint_of(name, probe))
    return row


def figures(report: dict) -> dict:
    if "load_error" in report:
        return {"error": report["load_error"]}
    t = report["throughput"]
    return {"output_tok_s": t["output_tok_s"], "total_tok_s": t["total_tok_s"],
            "ttft_p50_ms": report["ttft_ms"]["p50"], "ttft_p99_ms": report["ttft_ms"]["p99"],
            "tpot_p50_ms": report["tpot_ms"]["p50"], "tpot_p99_ms": report["tpot_ms"]["p99"],
            "completed": report["completed"], "requests": report["requests"],
            "prompt_tokens": report["prompt_tokens"], "output_tokens": report["output_tokens"],
            "verdict": report["verdict"]}


KEYS = ("output_tok_s", "total_tok_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "footprint_mib",
        "tree_rss_mib", "device_mib")


def summarize(rows: list[dict]) -> dict:
    out: dict = {}
    for row in rows:
        cell = out.setdefault(row["scenario"], {}).setdefault(row["server"], {"runs": 0, "verdicts": []})
        cell["runs"] += 1
        cell["verdicts"].append(row.get("verdict") or row.get("error", "?"))
        for key in KEYS:
            if isinstance(row.get(key), (int, float)):
                cell.setdefault("_" + key, []).append(row[key])
    for servers in out.values():
        for cell in servers.values():
            for key in KEYS:
                values = cell.pop("_" + key, [])
                if values:
                    cell[key] = {"median": round(statistics.median(values), 2), "min": min(values),
                                 "max": max(values)}
    return out


def table(summary: dict) -> str:
    head = f"{'scenario':<8} {'server':<14} {'runs':>4}  " + "  ".join(f"{k:>22}" for k in KEYS)
    lines = [head, "-" * len(head)]
    for scenario, servers in summary.items():
        for server, cell in servers.items():
            parts = []
            for key in KEYS:
                v = cell.get(key)
                parts.append(f"{v['median']:>9,.1f} [{v['min']:,.0f}-{v['max']:,.0f}]".rjust(22) if v else f"{'-':>22}")
            lines.append(f"{scenario:<8} {server:<14} {cell['runs']:>4}  " + "  ".join(parts))
            bad = [v for v in cell["verdicts"] if not str(v).startswith("ok")]
            if bad:
                lines.append(f"{'':<8} {'':<14} {'':>4}  not ok: {bad[0]}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python3 -m lab.serve_h200.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="a CPU dry run on a tiny model")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--deadline-s", type=float, default=500.0, help="start no run after this (default 500)")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/serve_h200"))
    args = parser.parse_args()
    setup = SMALL if args.small else GPU
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="serve_h200-"))
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    if args.small:
        env["OPENBLAS_NUM_THREADS"] = "1"
    t0 = time.monotonic()
    model_dir = work / "model"
    subprocess.run([PY, "-m", "app.models.model_dir", setup["model"], str(model_dir), "--dtype", setup["dtype"]],
                   cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    print(f"model directory {setup['model']} {setup['dtype']}: {time.monotonic() - t0:.1f} s", flush=True)
    if not args.small:  # the fused kernels the ragged scenario reaches, built once into the persistent cache
        sets = [a for s in setup["scenarios"]["ragged"][3:] for a in ("--set", s)]
        try:
            warm = subprocess.run([PY, "-m", "app", "warmup", "--head-dim", "128", "--q-heads", "16", "--kv-heads",
                                   "8", "--dtype", "bfloat16", "--scenario", "churn", *sets],
                                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
            print(f"kernel warm-up: exit {warm.returncode}, {time.monotonic() - t0:.1f} s", flush=True)
        except subprocess.TimeoutExpired:
            print("kernel warm-up: not done within 120 s (the servers build what is missing)", flush=True)
    rows: list[dict] = []

    def save() -> dict:
        """Every run so far, written after each one: a run cut short by a deadline still leaves its figures."""
        result = {"setup": dict(setup), "rounds": args.rounds, "rows": rows, "summary": summarize(rows),
                  "wall_s": round(time.monotonic() - t0, 1), "commit": _commit(),
                  "servers": {"slabscope serve": "--prefill-chunk 2048 (mlx_lm.server's prefill step), block 32, "
                                                 "slab 32, prefix cache 8192 tokens, max running 64 (defaults "
                                                 "otherwise)",
                              "mlx_lm.server": "stock: decode-concurrency 32, prompt-concurrency 8, "
                                               "prefill-step-size 2048, prompt-cache-size 10"}}
        (out / "serve_h200.json").write_text(json.dumps(result, indent=1))
        return result

    for rnd in range(args.rounds):
        for scenario in setup["scenarios"]:
            order = SERVERS[rnd % 3:] + SERVERS[:rnd % 3]
            for name in order:
                if time.monotonic() - t0 > args.deadline_s:
                    print(f"deadline: round {rnd + 1} {scenario} {name} not run", flush=True)
                    continue
                row = one_run(name, scenario, setup, model_dir, work, env, rnd + 1)
                rows.append(row)
                print(json.dumps(row), flush=True)
                save()
    result = save()
    print(table(result["summary"]))
    print(f"wall {result['wall_s']} s; {out / 'serve_h200.json'}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=5).stdout.strip() or None
    except OSError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
