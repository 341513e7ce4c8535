"""A synthetic model written as an mlx-lm directory (app/models/model_dir.py), the model ``slabscope serve`` and
``mlx_lm.server`` share in ``load``'s comparisons: mlx-lm loads it with logits equal to the synthetic model's; its
tokenizer encodes and decodes exactly as ``ByteTokenizer`` (every id, random sequences); a directory in the way or a
model that is not synthetic is refused with nothing written."""

from __future__ import annotations

import random

import mlx.core as mx
import pytest

from app.models import load_model
from app.models.model_dir import write_model_dir
from app.models.synthetic import ByteTokenizer

from workloads.helpers import load


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return load_model(str(write_model_dir("synthetic:tiny-qwen3", tmp_path_factory.mktemp("m") / "tiny")))


def test_mlx_lm_loads_the_same_model(written):
    synthetic = load("synthetic:tiny-qwen3")
    tokens = mx.array([[5, 60, 300, 7, 511, 3]])
    assert mx.array_equal(written.model(tokens), synthetic.model(tokens))
    assert written.eos_token_ids == {0} and written.tokenizer.has_chat_template
    assert written.max_positions == synthetic.max_positions


def test_its_tokenizer_is_byte_tokenizers_twin(written):
    ours, theirs = written.tokenizer, ByteTokenizer(512)
    text = "Grüße, 漢字 and <300> tokens\n\t!"
    assert ours.encode(text) == theirs.encode(text)
    assert all(ours.decode([i]) == theirs.decode([i]) for i in range(512))
    rng = random.Random(2)
    for _ in range(100):
        ids = [rng.randrange(512) for _ in range(rng.randrange(1, 30))]
        assert ours.decode(ids) == theirs.decode(ids)


@pytest.mark.parametrize("name,words", [("smollm2-135m", "not a synthetic model"),
                                        ("synthetic:nope", "not a synthetic model")])
def test_what_it_refuses(tmp_path, name, words):
    with pytest.raises(ValueError, match=words):
        write_model_dir(name, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not an empty directory"):
        write_model_dir("synthetic:tiny-llama", tmp_path / "busy")
    assert [p.name for p in (tmp_path / "busy").iterdir()] == ["keep.txt"]
