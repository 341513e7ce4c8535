"""The front's text stream (app/serve/text.py): streamed deltas add up to the whole decode, an incomplete UTF-8
character is never sent half, stop strings cut the text wherever they fall across tokens and are never streamed in
part, a trailing end-of-sequence token is counted but is not text."""

from __future__ import annotations

import random

import pytest

from app.models.synthetic import ByteTokenizer
from app.serve.text import TextStream

TOKENIZER = ByteTokenizer(512)
TEXT = "Grüße aus Köln: 漢字 and 🦀 crabs, then plain ASCII to the end."


def ids(text: str) -> list[int]:
    return TOKENIZER.encode(text)


def streamed(stream: TextStream, tokens: list[int], chunk: int) -> tuple[list[str], str]:
    deltas = []
    for i in range(0, len(tokens), chunk):
        stream.add(tokens[i:i + chunk], last=i + chunk >= len(tokens))
        deltas.append(stream.take())
    return deltas, stream.finish()


@pytest.mark.parametrize("chunk", [1, 2, 5])
def test_deltas_add_up_to_the_whole_decode_and_never_split_a_character(chunk):
    stream = TextStream(TOKENIZER)
    deltas, rest = streamed(stream, ids(TEXT), chunk)
    assert "".join(deltas) + rest == TEXT == stream.text
    assert all("\ufffd" not in d for d in deltas)
    assert stream.tokens_used == len(ids(TEXT))


def test_a_stop_string_across_tokens_cuts_the_text_and_counts_the_tokens_to_it():
    stream = TextStream(TOKENIZER, stop=["crabs"])
    deltas, rest = streamed(stream, ids(TEXT), 1)
    cut = TEXT[:TEXT.index("crabs")]
    assert stream.stopped and "".join(deltas) + rest == cut == stream.text
    assert stream.tokens_used == len(ids(TEXT[:TEXT.index("crabs") + len("crabs")]))


def test_the_earliest_of_several_stop_strings_wins():
    stream = TextStream(TOKENIZER, stop=["ASCII", "and"])
    streamed(stream, ids(TEXT), 3)
    assert stream.text == TEXT[:TEXT.index("and")]


def test_a_possible_stop_string_start_is_held_back_until_it_is_not_one():
    stream = TextStream(TOKENIZER, stop=["abc"])
    stream.add(ids("xxab"))
    assert stream.take() == "xx"  # "ab" may begin "abc"
    stream.add(ids("d"))
    assert stream.take() == "abd" and not stream.stopped


def test_a_trailing_end_of_sequence_is_counted_but_not_text():
    stream = TextStream(TOKENIZER, eos_ids=[TOKENIZER.eos_token_id])
    stream.add(ids("done") + [TOKENIZER.eos_token_id], last=True)
    assert stream.finish() == "done" and stream.tokens_used == 5


def test_random_token_streams_add_up_to_their_decode():
    rng = random.Random(3)
    for _ in range(50):
        tokens = [rng.randrange(512) for _ in range(rng.randrange(1, 40))]
        stream = TextStream(TOKENIZER)
        deltas, rest = streamed(stream, tokens, rng.randrange(1, 4))
        assert "".join(deltas) + rest == TOKENIZER.decode(tokens)


def test_two_stop_strings_in_one_token_cut_at_the_first():
    stream = TextStream(TOKENIZER, stop=["0>", "30"])  # token 300 decodes to "<300>" at once
    stream.add(ids("ab") + [300])
    assert stream.stopped and stream.finish() == "ab<"
