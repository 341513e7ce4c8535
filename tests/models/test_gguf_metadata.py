"""The embedded GGUF's metadata read by the gguf package's GGUFReader (app/models/gguf_metadata.py), against MLX's
own GGUF loader, and its per-file cache (GGUFReader parses the whole header: seconds, so it is read once per file).
The hand-written header reader it replaced is gone; the model still loads (tests/models/test_smollm2.py) and the
tokenizer, built from ``mx.load``'s metadata, is unchanged (tests/models/test_gguf_tokenizer.py)."""

from __future__ import annotations

import os

import pytest

from app.models import gguf_metadata as gm
from app.models.gguf_smollm2 import locate_gguf

KEYS = ("llama.context_length", "llama.block_count", "llama.attention.head_count", "llama.attention.head_count_kv",
        "llama.embedding_length", "llama.feed_forward_length", "general.architecture", "tokenizer.ggml.eos_token_id")


def test_gguf_reader_reads_what_mlx_reads(gguf_metadata, tmp_path, monkeypatch):
    from app.models.gguf_tokenizer import _scalar

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    gm._metadata.cache_clear()
    meta = gm.gguf_metadata(locate_gguf())
    for key in KEYS:
        assert meta[key] == _scalar(gguf_metadata, key), key
    assert meta["llama.context_length"] == 8192 and "tokenizer.ggml.tokens" not in meta  # arrays left out


def test_metadata_is_read_once_per_file_and_again_when_the_file_changes(tmp_path, monkeypatch):
    """A copy of the GGUF's header section is not needed: the cache is keyed by path, size and mtime."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gm._metadata.cache_clear()
    calls = []
    real = gm.read_with_gguf
    monkeypatch.setattr(gm, "read_with_gguf", lambda path: calls.append(path) or real(path))
    source = tmp_path / "model.gguf"
    os.symlink(locate_gguf(), source)
    first = gm.gguf_metadata(source)
    gm._metadata.cache_clear()  # a new process: the disk cache answers
    assert gm.gguf_metadata(source) == first and len(calls) == 1
    (entry,) = (tmp_path / "cache" / "slabscope" / "gguf-metadata").iterdir()
    entry.write_text("{not json")  # a damaged cache entry is read again from the file
    gm._metadata.cache_clear()
    assert gm.gguf_metadata(source) == first and len(calls) == 2


def test_a_file_that_is_not_gguf_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for content in (b"NOPE" + bytes(20), b"GGUF"):
        bad = tmp_path / "x.gguf"
        bad.write_bytes(content)
        with pytest.raises(ValueError, match="not a GGUF file") as info:
            gm.gguf_metadata(bad)
        assert "\n" not in str(info.value)
