"""A Hugging Face fast tokenizer rebuilt from a GGUF file's ``tokenizer.ggml.*`` metadata (byte-level BPE).

The GGUF carries the vocabulary, the merges, per-token types, BOS/EOS/UNK/PAD ids and the chat template, but not
the pre-tokenizer itself: only its llama.cpp name in ``tokenizer.ggml.pre``. For ``smollm`` (also starcoder,
refact, ...) llama.cpp splits with ``\\p{N}`` (every digit alone) and then the GPT-2 regex, which is exactly
``Digits(individual_digits=True)`` followed by ``ByteLevel(add_prefix_space=False, use_regex=True)`` in the
``tokenizers`` library. Control tokens (type 3) become special added tokens so ``<|im_start|>`` encodes as one id.
"""

from __future__ import annotations

import os
from typing import Any

# GGUF token types (llama.cpp's llama_token_type).
TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

# llama.cpp pre-tokenizer names whose split is "each digit alone, then the GPT-2 regex".
_DIGITS_THEN_GPT2 = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}
_GPT2_ONLY = {"gpt2", "default", "mpt", "olmo", "jais"}


def _scalar(meta: dict[str, Any], key: str, default: Any = None) -> Any:
    """A metadata scalar as a Python value (mx.load returns 0-d arrays for numbers and booleans)."""
    value = meta.get(key, default)
    return value.item() if hasattr(value, "item") else value


def _pre_tokenizer(pre_name: str):
    from tokenizers import pre_tokenizers

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre_name in _DIGITS_THEN_GPT2:
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre_name in _GPT2_ONLY:
        return byte_level
    raise ValueError(f"GGUF tokenizer pre-tokenizer {pre_name!r} is not supported "
                     f"(supported: {sorted(_DIGITS_THEN_GPT2 | _GPT2_ONLY)})")


def build_backend_tokenizer(meta: dict[str, Any]):
    """A ``tokenizers.Tokenizer`` (BPE + byte-level pre-tokenizer/decoder + special tokens) from GGUF metadata."""
    from tokenizers import AddedToken, Tokenizer, decoders, models

    model_kind = meta.get("tokenizer.ggml.model")
    if model_kind != "gpt2":
        raise ValueError(f"GGUF tokenizer model {model_kind!r} is not supported (only byte-level BPE 'gpt2')")
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    # Byte-level tokens never contain a literal space (it is 'Ġ'), so every merge splits into exactly two parts.
    merges = [tuple(m.split(" ")) for m in meta["tokenizer.ggml.merges"]]
    bad = [m for m in merges if len(m) != 2]
    if bad:
        raise ValueError(f"malformed GGUF merges (expected 'a b'): {bad[:3]}")
    vocab = {tok: i for i, tok in enumerate(tokens)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    backend.pre_tokenizer = _pre_tokenizer(meta.get("tokenizer.ggml.pre", "gpt2"))
    backend.decoder = decoders.ByteLevel()
    types = meta["tokenizer.ggml.token_type"].tolist()
    specials = [tokens[i] for i, t in enumerate(types) if t in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)]
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return backend


def _token_text(tokens: list[str], meta: dict[str, Any], key: str) -> str | None:
    index = _scalar(meta, key)
    return tokens[int(index)] if index is not None and 0 <= int(index) < len(tokens) else None


def eos_token_ids_from_metadata(meta: dict[str, Any]) -> list[int]:
    """EOS ids: the metadata's EOS plus ``<|endoftext|>`` if the vocabulary has it (a finished document ends too)."""
    tokens = meta["tokenizer.ggml.tokens"]
    ids = [int(_scalar(meta, "tokenizer.ggml.eos_token_id"))]
    if "<|endoftext|>" in tokens:
        ids.append(tokens.index("<|endoftext|>"))
    return sorted(set(ids))


def build_tokenizer(meta: dict[str, Any]):
    """mlx-lm ``TokenizerWrapper`` over a ``PreTrainedTokenizerFast`` built from GGUF metadata.

    Forwards ``encode``/``decode``/``apply_chat_template`` to the HF tokenizer; adds ``eos_token_ids`` and a
    streaming ``detokenizer``. ``encode`` adds no BOS (``tokenizer.ggml.add_bos_token`` is False for SmolLM2;
    honoured if True).
    """
    # transformers prints an advisory about PyTorch on import; it is irrelevant here (tokenizers only).
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer, TokenizerWrapper
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    backend = build_backend_tokenizer(meta)
    tokens = list(meta["tokenizer.ggml.tokens"])
    bos = _token_text(tokens, meta, "tokenizer.ggml.bos_token_id")
    if _scalar(meta, "tokenizer.ggml.add_bos_token", False) and bos is not None:
        bos_id = tokens.index(bos)
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=bos,
        eos_token=_token_text(tokens, meta, "tokenizer.ggml.eos_token_id"),
        unk_token=_token_text(tokens, meta, "tokenizer.ggml.unknown_token_id"),
        pad_token=_token_text(tokens, meta, "tokenizer.ggml.padding_token_id"),
        chat_template=meta.get("tokenizer.chat_template"),
        clean_up_tokenization_spaces=False,
    )
    return TokenizerWrapper(hf, detokenizer_class=BPEStreamingDetokenizer,
                            eos_token_ids=eos_token_ids_from_metadata(meta))
