"""The SmolLM2 tokenizer rebuilt from GGUF metadata: specials, byte-level round trips, the chat template."""

import jinja2
import pytest

from app.models.gguf_tokenizer import build_backend_tokenizer, build_tokenizer

CHAT = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def tokenizer(gguf_metadata):
    return build_tokenizer(gguf_metadata)


def test_special_tokens_encode_as_single_ids(tokenizer):
    ids = tokenizer.encode("<|im_start|>user\nHello<|im_end|>")
    assert ids[0] == 1 and ids[-1] == 2
    assert tokenizer.convert_ids_to_tokens(ids) == ["<|im_start|>", "user", "Ċ", "Hello", "<|im_end|>"]


def test_every_control_token_is_one_id(tokenizer, gguf_metadata):
    tokens, types = gguf_metadata["tokenizer.ggml.tokens"], gguf_metadata["tokenizer.ggml.token_type"].tolist()
    controls = [(i, tokens[i]) for i, t in enumerate(types) if t == 3]
    assert len(controls) == 17
    for token_id, text in controls:
        assert tokenizer.encode(f"a{text}b") == [tokenizer.encode("a")[0], token_id, tokenizer.encode("b")[0]]


def test_no_bos_is_added_and_ids_come_from_metadata(tokenizer):
    assert tokenizer.encode("Hello") == [19556]
    assert tokenizer.bos_token_id == 1 and tokenizer.eos_token_id == 2
    assert tokenizer.eos_token_ids == {0, 2}  # <|im_end|> from metadata, plus <|endoftext|>


@pytest.mark.parametrize("text", [
    "Grüße, 世界! 🚀 naïve café — ½",
    "  leading spaces, tabs\tand\n\nnewlines  ",
    "don't stop: it's 2024-11-29, 3.14159",
    "Ωμέγα Привет مرحبا שלום नमस्ते",
])
def test_unicode_round_trip(tokenizer, text):
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text


def test_digits_are_split_one_per_token(tokenizer):
    # llama.cpp's 'smollm' pre-tokenizer: \p{N} first, so "12345" is five tokens, one per digit
    ids = tokenizer.encode("12345")
    assert [tokenizer.decode([i]) for i in ids] == ["1", "2", "3", "4", "5"]


def test_spaces_follow_gpt2_regex(tokenizer):
    # 's+(?!\S)': of a run of spaces, the last one joins the next word ("Ġtwo"), the rest stay alone
    pieces = tokenizer.convert_ids_to_tokens(tokenizer.encode("one   two"))
    assert pieces == ["one", "ĠĠ", "Ġtwo"]


def test_chat_template_matches_the_gguf_template(tokenizer, gguf_metadata):
    template = jinja2.Environment().from_string(gguf_metadata["tokenizer.chat_template"])
    expected = template.render(messages=CHAT, add_generation_prompt=True)
    rendered = tokenizer.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    assert rendered == expected
    assert rendered == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                        "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                        "<|im_start|>assistant\n")
    ids = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True)
    assert ids == tokenizer.encode(rendered)
    assert ids.count(1) == 3 and ids.count(2) == 2  # three <|im_start|>, two <|im_end|>


def test_streaming_detokenizer_matches_decode(tokenizer):
    text = "Paris is the capital of France. Grüße 🚀!"
    ids = tokenizer.encode(text)
    detok = tokenizer.detokenizer
    detok.reset()
    for token in ids:
        detok.add_token(token)
    detok.finalize()
    assert detok.text == text


def test_unsupported_tokenizer_kinds_are_rejected(gguf_metadata):
    with pytest.raises(ValueError, match="only byte-level BPE"):
        build_backend_tokenizer({**gguf_metadata, "tokenizer.ggml.model": "llama"})
    with pytest.raises(ValueError, match="pre-tokenizer 'qwen2' is not supported"):
        build_backend_tokenizer({**gguf_metadata, "tokenizer.ggml.pre": "qwen2"})
