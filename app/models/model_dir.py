"""Write a synthetic model as an mlx-lm model directory, so other servers load the very same model.

``slabscope load`` puts ``slabscope serve`` beside ``mlx_lm.server`` on the same traffic; both must load the same
weights and tokenize the same way. ``write_model_dir("synthetic:qwen3-0.6b", out, dtype="bfloat16")`` writes what
``mlx_lm.utils.load`` reads: ``config.json`` (the synthetic config, with its end-of-sequence id),
``model.safetensors`` (the seeded weights ``build_synthetic`` makes, so the directory's logits equal the synthetic
model's) and a Hugging Face tokenizer that mirrors ``ByteTokenizer``: ids 0-2 are ``<eos>``, ``<bos>``, ``<pad>``,
ids 3-258 the 256 bytes, and every id above decodes to ``<id>`` (as ``ByteTokenizer`` decodes it), so most of a random
model's tokens are text at once and a stream carries one per token on every server. Text encodes byte by byte,
exactly as ``ByteTokenizer`` encodes it: a prompt of N ASCII characters is N tokens on every server. A small chat
template (``<|role|>`` lines) makes chat requests work.

    python -m app.models.model_dir synthetic:qwen3-0.6b /tmp/qwen3-0.6b --dtype bfloat16
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

SPECIALS = ("<eos>", "<bos>", "<pad>")
CHAT_TEMPLATE = ("{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def byte_alphabet() -> list[str]:
    """GPT-2's byte-to-character map (what the byte-level pre-tokenizer and decoder use): character of byte b."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def byte_vocab(vocab_size: int) -> dict[str, int]:
    """The tokenizer's vocabulary (see the module docstring): specials, bytes, then unique filler strings."""
    if vocab_size < len(SPECIALS) + 256:
        raise ValueError(f"a byte tokenizer needs vocab_size >= {len(SPECIALS) + 256}, got {vocab_size}")
    vocab = {name: i for i, name in enumerate(SPECIALS)}
    for b, char in enumerate(byte_alphabet()):
        vocab[char] = len(SPECIALS) + b
    for i in range(len(vocab), vocab_size):  # printable ASCII is itself in the byte-level alphabet
        vocab[f"<{i}>"] = i
    return vocab


def write_tokenizer(out: Path, vocab_size: int, max_positions: int | None) -> None:
    """``tokenizer.json`` and ``tokenizer_config.json`` of the byte tokenizer in ``out``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokenizer = Tokenizer(models.BPE(vocab=byte_vocab(vocab_size), merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIALS))
    tokenizer.save(str(out / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<eos>", "bos_token": "<bos>",
              "pad_token": "<pad>", "add_bos_token": False, "clean_up_tokenization_spaces": False,
              "chat_template": CHAT_TEMPLATE, "model_max_length": max_positions or 1 << 20}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1))


def write_model_dir(name: str, out: str | os.PathLike, *, dtype: str = "float32", seed: int = 0) -> Path:
    """Write synthetic model ``name`` ("synthetic:NAME") into the new directory ``out`` (see the module
    docstring); returns its path. ValueError for a name that is not a synthetic model or a directory that exists
    and is not empty (nothing is written over)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from .registry import SYNTHETIC_PREFIX
    from .synthetic import SYNTHETIC_CONFIGS, build_synthetic

    key = name.removeprefix(SYNTHETIC_PREFIX)
    if not name.startswith(SYNTHETIC_PREFIX) or key not in SYNTHETIC_CONFIGS:
        raise ValueError(f"{name!r} is not a synthetic model (known: "
                         f"{', '.join(SYNTHETIC_PREFIX + k for k in SYNTHETIC_CONFIGS)})")
    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ValueError(f"{target} exists and is not an empty directory")
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    config = dict(SYNTHETIC_CONFIGS[key])
    model = build_synthetic(config, seed=seed, dtype=getattr(mx, dtype))
    target.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(target / "model.safetensors"), dict(tree_flatten(model.parameters())))
    config.update(eos_token_id=0, bos_token_id=1, torch_dtype=dtype,
                  slabscope={"synthetic": name, "seed": seed, "dtype": dtype})
    (target / "config.json").write_text(json.dumps(config, indent=1))
    write_tokenizer(target, int(config["vocab_size"]), config.get("max_position_embeddings"))
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.models.model_dir",
                                     description="write a synthetic model as an mlx-lm model directory")
    parser.add_argument("model", help="synthetic:NAME")
    parser.add_argument("out", help="a new (or empty) directory")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from .blas import enable_openblas

    enable_openblas()
    try:
        path = write_model_dir(args.model, args.out, dtype=args.dtype, seed=args.seed)
    except ValueError as exc:
        print(f"model_dir: {exc}")
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
