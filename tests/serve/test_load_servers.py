"""``slabscope load`` against ``slabscope serve --backend slab``, ``--backend dense`` and ``mlx_lm.server`` on the same
model (a tiny synthetic model written as an mlx-lm directory: ``app.models.model_dir``) and the same scenario, on
the CPU: every request answered by all three, the same prompt and output token counts, the same greedy text; a
server whose engine is killed mid-run is reported as such by ``load``, which still exits 0; a server that is not
there is one line and exit 1.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

import pytest

from probes.events import RequestArrived

from .server_proc import Server, free_port, post_raw, serve, start_serve, wait_recorded, wait_state

pytestmark = pytest.mark.slow
SCENARIO = ["--scenario", "churn", "--set", "n=8", "concurrency=4", "prompt_min=24", "prompt_max=96", "gen_min=6",
            "gen_max=12"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from app.models.model_dir import write_model_dir

    return str(write_model_dir("synthetic:tiny-llama", tmp_path_factory.mktemp("models") / "tiny-llama"))


@pytest.fixture(scope="module")
def servers(model_dir):
    """The three servers on the same model directory, started together."""
    port = free_port()
    mlx_lm = Server([sys.executable, "-m", "mlx_lm.server", "--model", model_dir, "--host", "127.0.0.1", "--port",
                     str(port)], env={"OPENBLAS_NUM_THREADS": "1"})
    ours = {backend: start_serve("--model", model_dir, "--backend", backend) for backend in ("slab", "dense")}
    for server in ours.values():
        server.wait_ready()
    ours["mlx_lm.server"] = mlx_lm.wait_healthy(f"http://127.0.0.1:{port}")
    yield ours
    for name, server in ours.items():
        code = server.stop()
        assert code in (0, -signal.SIGTERM), f"{name} exited with {code}"


def run_load(cli, url: str, model_dir: str, *extra: str) -> dict:
    code, out, err = cli(["load", "--url", url, "--model", model_dir, "--tokenizer", model_dir, "--json", *SCENARIO,
                          *extra])
    assert code == 0, err
    return json.loads(out)


def test_load_against_slab_dense_and_mlx_lm_server_on_the_same_model(servers, model_dir, cli):
    reports = {name: run_load(cli, server.url, model_dir) for name, server in servers.items()}
    for name, report in reports.items():
        assert report["completed"] == report["requests"] == 8 and not report["errors"], (name, report)
        assert report["verdict"].startswith("ok"), report["verdict"]
        for key in ("ttft_ms", "tpot_ms", "latency_ms"):
            assert report[key]["n"] == 8 and 0 < report[key]["p50"] <= report[key]["p90"] <= report[key]["p99"]
        assert report["throughput"]["output_tok_s"] > 0
    prompt_tokens = {name: r["prompt_tokens"] for name, r in reports.items()}
    assert len(set(prompt_tokens.values())) == 1, prompt_tokens  # one tokenizer: the same prompts everywhere
    ours = {reports[name]["output_tokens"] for name in ("slab", "dense")}
    assert len(ours) == 1 and reports["mlx_lm.server"]["output_tokens"] <= ours.pop()  # mlx-lm may stop at EOS
    for server in servers.values():
        if server.engine_pid is not None:
            state = wait_state(server, lambda s: not s["running"] and not s["waiting"])
            assert state["integrity"] == "ok" and state["live_sequences"] == []


def test_the_three_servers_give_the_same_greedy_answer(servers, model_dir):
    texts = {}
    for name, server in servers.items():
        code, answer = post_raw(server.url + "/v1/completions", json.dumps(
            {"model": model_dir, "prompt": "the river runs to the sea", "max_tokens": 16, "temperature": 0})
            .encode())
        assert code == 200, answer
        texts[name] = answer["choices"][0]["text"]
    # mlx-lm's streaming detokenizer leaves the byte-level characters of some control bytes (U+0100 for 0x00, ...)
    # untranslated where Hugging Face's decode gives the bytes: the same token ids, written two ways
    from app.models.model_dir import byte_alphabet

    untranslated = {ord(char): byte for byte, char in enumerate(byte_alphabet()) if ord(char) >= 256}
    texts["mlx_lm.server"] = texts["mlx_lm.server"].translate(untranslated)
    assert len(set(texts.values())) == 1, texts


def test_prefix_reuse_on_the_slab_server_changes_no_answer(servers, model_dir):
    """Two prompts sharing 600 tokens: the second starts from the first's cached blocks (512 of them: shared
    prefixes end on a prefill-chunk boundary), and its greedy answer equals the dense server's, which shares
    nothing."""
    shared = "".join(chr(97 + (i * 7) % 26) for i in range(600))
    slab, dense = servers["slab"], servers["dense"]
    before = slab.state()["prefix_cache"]
    answers = {}
    for name, server in (("slab", slab), ("dense", dense)):
        for suffix in (" first question", " second question"):
            code, answer = post_raw(server.url + "/v1/completions", json.dumps(
                {"model": model_dir, "prompt": shared + suffix, "max_tokens": 12, "temperature": 0}).encode())
            assert code == 200, answer
            answers[name, suffix] = answer["choices"][0]["text"]
    after = slab.state()["prefix_cache"]
    assert after["hits"] > before["hits"] and after["cached_tokens"] - before["cached_tokens"] >= 512
    assert answers["slab", " second question"] == answers["dense", " second question"]
    assert answers["slab", " first question"] == answers["dense", " first question"]


def test_a_server_whose_engine_dies_mid_run_is_reported_not_a_crash_of_load(model_dir, cli, tmp_path):
    server = serve("--model", model_dir, "--backend", "slab", "--record", str(tmp_path))
    try:
        outcome: dict = {}
        longer = ["--scenario", "churn", "--set", "n=40", "concurrency=4", "prompt_min=24", "prompt_max=64",
                  "gen_min=150", "gen_max=200"]
        worker = threading.Thread(target=_run_cli, args=(cli, outcome, server.url, longer))
        worker.start()
        wait_state(server, lambda s: s["running"])
        wait_recorded(tmp_path, lambda session: session.events_of(RequestArrived))  # on disk before the kill
        os.kill(server.engine_pid, signal.SIGKILL)  # what the out-of-memory killer does
        worker.join(120)
        assert not worker.is_alive()
        code, out, _ = outcome["result"]
        assert code == 0
        report = json.loads(out)
        assert report["completed"] < report["requests"] and report["errors"]
        assert "killed by signal 9" in report["server_health_after"]
        assert report["verdict"].startswith("server failed: the server") and "killed" in report["verdict"]
        # the engine's recording survives the SIGKILL: readable up to its last write, without an END record
        from probes.replay import Session

        (path,) = tmp_path.glob("*.slabrec")
        session = Session.open(path)
        assert not session.complete and session.events_of(RequestArrived) and len(session.samples) > 0
    finally:
        assert server.stop() == 0


def _run_cli(cli, outcome: dict, url: str, scenario: list[str]) -> None:
    outcome["result"] = cli(["load", "--url", url, "--json", "--chars-per-token", "1", *scenario])


def test_load_against_nothing_is_one_line_and_exit_1(cli):
    code, out, err = cli(["load", "--url", f"http://127.0.0.1:{free_port()}", "--scenario", "churn"])
    assert code == 1 and out == "" and len(err) == 1 and "cannot reach" in err[0]
