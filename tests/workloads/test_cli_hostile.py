"""Every hostile invocation from the hostile-input attack (issue 12) through the CLI entry point: exit 2 (usage) or 1
(runtime), exactly one line on stderr, no traceback, and nothing started (no runaway memory or time). Most run
in-process through ``app.cli.main`` (an escaping exception would fail the test); the ones where the process itself
is the point (a segfault, undecodable argv bytes) run ``python -m app`` in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import main

from .helpers import burst_toml, write_scenario

RECORDINGS = Path(__file__).resolve().parents[2] / "assets" / "recordings"
SLAB_REC, DENSE_REC = str(RECORDINGS / "sample-churn-slab.slabrec"), str(RECORDINGS / "sample-churn-dense.slabrec")
UNWRITABLE = "/proc/slabscope-no-such-dir/out"  # creating anything under /proc fails, even for root
TINY = "synthetic:tiny-llama"


def run_cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    """(exit code, stderr lines) of one in-process invocation."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = exc.code if isinstance(exc.code, int) else 1
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.fixture
def files(tmp_path):
    """Scenario files and model directories the cases name, by key."""
    def scenario(key: str, body: str) -> str:
        return write_scenario(tmp_path, body, name=key)

    empty_cfg, no_weights = tmp_path / "empty-config", tmp_path / "no-weights"
    empty_cfg.mkdir()
    (empty_cfg / "config.json").write_text("{}")
    (empty_cfg / "model.safetensors").write_bytes(b"")
    no_weights.mkdir()
    (no_weights / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "a-file").write_text("x")
    return {
        "empty_list": scenario("empty_list", burst_toml(prompt_tokens="[]")),
        "count_1e12": scenario("count_1e12", '[[phases]]\nname = "p"\nkind = "requests"\ncount = 1e12\n'),
        "idle_inf": scenario("idle_inf", '[[phases]]\nname = "p"\nkind = "idle"\nseconds = inf\n'),
        "empty_cfg": str(empty_cfg), "no_weights": str(no_weights),
        "file": str(tmp_path / "a-file"), "dir": str(tmp_path), "missing_dir": str(tmp_path / "nope" / "x.slabrec"),
    }


# (case, argv with {keys} from `files`, exit code, text the one line must hold)
CASES = [
    # crashes in the issue: tracebacks
    ("empty list in a scenario TOML", ["run", "--scenario", "{empty_list}"], 2,
     "prompt_tokens must be an int or [min, max], got []"),
    ("model dir with {} config", ["run", "--model", "{empty_cfg}"], 2, "names no model_type"),
    ("model dir with no weights", ["run", "--model", "{no_weights}"], 2, "has no model*.safetensors weights"),
    ("--block-size 10**12", ["run", "--model", TINY, "--block-size", str(10**12)], 1,
     "block_size 1,000,000,000,000 exceeds MLX's largest shape dimension"),
    ("--record into a missing directory", ["run", "--model", TINY, "--record", "{missing_dir}"], 2,
     "does not exist"),
    ("--record onto an existing directory", ["run", "--model", TINY, "--record", "{dir}"], 2, "is a directory"),
    ("record --out a regular file", ["record", "--out", "{file}"], 2, "exists and is not a directory"),
    ("record --out an unwritable place", ["record", "--out", UNWRITABLE], 2, "cannot create the directory"),
    ("report --out a regular file", ["report", SLAB_REC, "--out", "{file}"], 2, "exists and is not a directory"),
    ("report --out an unwritable place", ["report", SLAB_REC, "--out", UNWRITABLE], 2,
     "cannot create the directory"),
    ("generate --prompt '' without the chat template",
     ["generate", "--prompt", "", "--no-chat-template", "--model", TINY], 2, "encodes to no tokens"),
    ("undecodable bytes in a prompt", ["generate", "--prompt", "caf\udce9", "--model", TINY], 2,
     "--prompt is not valid UTF-8 text"),
    ("generate --block-size 0", ["generate", "--prompt", "hi", "--block-size", "0"], 2,
     "argument --block-size: must be >= 1, got 0"),
    # runaway memory or time
    ("--set prompt_tokens=10**12", ["run", "--scenario", "distinct_burst", "--set", f"prompt_tokens={10**12}"], 2,
     "prompt_tokens 1,000,000,000,000 exceeds the limit 1,048,576"),
    ("--set n=10**12", ["run", "--set", f"n={10**12}"], 2, "count 1,000,000,000,000 exceeds the limit 100,000"),
    ("--set n=10**12 (as typed)", ["run", "--set", "n=10**12"], 2, "count must be a whole number, got '10**12'"),
    ("count = 1e12 in a TOML", ["run", "--scenario", "{count_1e12}"], 2,
     "count must be a whole number, got 1000000000000.0"),
    ("100,000-token prompt on a model with 8,192 positions",
     ["run", "--scenario", "distinct_burst", "--set", "prompt_tokens=100000"], 2,
     "sequences of up to 100,032 tokens (prompt + generated) exceed smollm2-135m's 8,192 positions"),
    ("gen_tokens=10**12", ["run", "--scenario", "distinct_burst", "--set", f"gen_tokens={10**12}"], 2,
     "gen_tokens 1,000,000,000,000 exceeds the limit"),
    ("gen_tokens past the context", ["run", "--scenario", "distinct_burst", "--set", "gen_tokens=8000"], 2,
     "exceed smollm2-135m's 8,192 positions"),
    ("generate --max-tokens past the context", ["generate", "--prompt", "hi", "--model", TINY, "--max-tokens",
                                                "5000"], 2, "exceed synthetic:tiny-llama's 4,096 positions"),
    ("idle seconds=inf in a TOML", ["run", "--scenario", "{idle_inf}"], 2, "seconds must be in [0, 86,400], got inf"),
    ("idle --set seconds=inf", ["run", "--scenario", "idle", "--set", "seconds=inf"], 2, "got inf"),
    ("the TUI on an unknown scenario", ["tui", "--scenario", "nosuch"], 2, "unknown scenario 'nosuch'"),
    ("the TUI (no command) on an unknown scenario", ["--scenario", "nosuch"], 2, "unknown scenario 'nosuch'"),
    # quietly wrong
    ("--set n=1.5", ["run", "--set", "n=1.5"], 2, "count must be a whole number, got 1.5"),
    ("--set n=true", ["run", "--set", "n=true"], 2, "count must be a whole number, got True"),
    ("record --backends ''", ["record", "--out", "{dir}", "--backends", ""], 2, "backends must be a comma list"),
    ("record --backends slab,slab", ["record", "--out", "{dir}", "--backends", "slab,slab"], 2,
     "backend listed twice"),
    ("compare --max-ratio nan", ["compare", SLAB_REC, DENSE_REC, "--max-ratio", "nan"], 2,
     "argument --max-ratio: must be a finite number, got nan"),
    ("compare --baseline nosuch", ["compare", SLAB_REC, DENSE_REC, "--baseline", "nosuch"], 2,
     "--baseline 'nosuch' matches no session"),
    ("report --baseline nosuch", ["report", SLAB_REC, "--out", "{dir}", "--baseline", "nosuch"], 2,
     "--baseline 'nosuch' matches no session"),
    ("generate --temperature -1", ["generate", "--prompt", "hi", "--temperature", "-1"], 2,
     "argument --temperature: must be >= 0, got -1"),
    ("generate --top-p 5", ["generate", "--prompt", "hi", "--top-p", "5"], 2, "argument --top-p: must be <= 1, got 5"),
    ("tui --gate nan", ["tui", "--gate", "nan"], 2, "argument --gate: must be a finite number"),
    ("record --timeout -5", ["record", "--out", "{dir}", "--timeout", "-5"], 2, "argument --timeout: must be > 0"),
]


@pytest.mark.parametrize("case, argv, code, text", CASES, ids=[c[0] for c in CASES])
def test_hostile_invocation_is_one_line(case, argv, code, text, files, capsys, monkeypatch):
    monkeypatch.setattr("app.tui.app.SlabscopeApp.run", lambda self: pytest.fail("the TUI started"))
    got, err = run_cli([arg.format(**files) if "{" in arg else arg for arg in argv], capsys)
    assert got == code and len(err) == 1 and text in err[0] and "Traceback" not in err[0], (got, err)


@pytest.mark.parametrize("argv, code, text", [
    (["run", "--slab-blocks", "1000000000", "--model", TINY], 1,  # the check is the pool's, whatever the model
     "the pool's first slab (1,000,000,000 blocks x 32 tokens per layer)"),
    (["generate", "--prompt", b"caf\xe9".decode(errors="surrogateescape"), "--model", TINY], 2,
     "--prompt is not valid UTF-8 text"),
    (["run", "--block-size", "0"], 2, "slabscope run: error: argument --block-size: must be >= 1, got 0"),
], ids=["--slab-blocks 1e9 (was SIGSEGV)", "undecodable argv bytes", "usage error"])
def test_hostile_invocation_in_a_fresh_process(argv, code, text):
    result = subprocess.run([sys.executable, "-m", "app", *argv], capture_output=True, text=True, timeout=300,
                            errors="surrogateescape")
    err = result.stderr.strip().splitlines()
    assert result.returncode == code and len(err) == 1 and text in err[0], (result.returncode, result.stderr[-3000:])


def test_the_bounds_do_not_refuse_what_the_docs_run(tmp_path):
    """The largest runs in docs/ (8 x 4096-token prompts, the bundled scenarios) stay within every bound."""
    from app.models.registry import max_positions
    from app.workloads.limits import check_fits_context
    from app.workloads.scenarios import list_scenarios, load_scenario

    for name, _ in list_scenarios():
        check_fits_context(load_scenario(name), max_positions("smollm2-135m"), "smollm2-135m")
    big = load_scenario("distinct_burst", {"n": 8, "prompt_tokens": 4096, "gen_tokens": 32})
    check_fits_context(big, max_positions("synthetic:qwen3-0.6b"), "synthetic:qwen3-0.6b")
    write_scenario(tmp_path, burst_toml(n=100_000, prompt_tokens="[1, 80]"))
    load_scenario(str(tmp_path / "t.toml"))
