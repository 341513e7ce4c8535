"""OpenAI request bodies checked into jobs (app/serve/api.py), without a server: what is accepted and how it is
normalised; that every refusal names its field; the shapes of answers, chunks and errors the official client reads."""

from __future__ import annotations

import pytest

from app.serve import api

MODEL = "m"


def chat(**fields) -> api.Job:
    return api.parse_request("chat", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **fields},
                             MODEL)


def test_a_chat_body_becomes_a_job_with_openai_defaults():
    job = api.parse_request("chat", {"model": MODEL, "messages": [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}]}],
        "user": "someone", "metadata": {"a": 1}}, MODEL)
    assert job.messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    assert (job.temperature, job.top_p, job.max_tokens, job.seed, job.stop, job.stream) == \
        (1.0, 1.0, None, None, [], False)


def test_fields_are_read_as_given():
    job = chat(max_completion_tokens=7, max_tokens=99, temperature=0, top_p=0.5, seed=-3, stop="END", stream=True,
               stream_options={"include_usage": True}, ignore_eos=True)
    assert (job.max_tokens, job.temperature, job.top_p, job.seed, job.stop, job.include_usage, job.ignore_eos) == \
        (7, 0.0, 0.5, -3, ["END"], True, True)
    assert api.parse_request("chat", {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}, MODEL,
                             default_temperature=0.0).temperature == 0.0


@pytest.mark.parametrize("prompt,expected", [("text", "text"), (["one"], "one"), ([1, 2, 3], [1, 2, 3]),
                                             ([[4, 5]], [4, 5])])
def test_a_completion_prompt_is_text_or_token_ids(prompt, expected):
    assert api.parse_request("completion", {"model": MODEL, "prompt": prompt}, MODEL).prompt == expected


def test_the_model_may_be_named_by_an_alias():
    assert api.parse_request("completion", {"model": "default", "prompt": "x"}, MODEL, ("default",)).model == \
        "default"


@pytest.mark.parametrize("fields,status,param", [
    ({"model": "other"}, 404, "model"),
    ({"model": None}, 400, "model"),
    ({"messages": []}, 400, "messages"),
    ({"messages": "hi"}, 400, "messages"),
    ({"n": 3}, 400, "n"),
    ({"temperature": -0.1}, 400, "temperature"),
    ({"temperature": float("nan")}, 400, "temperature"),
    ({"temperature": True}, 400, "temperature"),
    ({"top_p": 1.5}, 400, "top_p"),
    ({"seed": 1.5}, 400, "seed"),
    ({"seed": 2**64}, 400, "seed"),
    ({"stop": ["a"] * 5}, 400, "stop"),
    ({"stop": [""]}, 400, "stop"),
    ({"stop": "x" * 300}, 400, "stop"),
    ({"max_tokens": True}, 400, "max_tokens"),
    ({"max_completion_tokens": 0}, 400, "max_completion_tokens"),
    ({"stream": "yes"}, 400, "stream"),
    ({"stream_options": {"include_usage": True}}, 400, "stream_options"),
    ({"frequency_penalty": 0.5}, 400, "frequency_penalty"),
    ({"tools": [{"type": "function"}]}, 400, "tools"),
])
def test_every_refusal_names_its_field(fields, status, param):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **fields}
    with pytest.raises(api.ApiError) as caught:
        api.parse_request("chat", body, MODEL)
    assert caught.value.status == status and caught.value.param == param
    assert caught.value.body()["error"]["message"]


def test_neutral_values_of_unsupported_fields_are_accepted():
    chat(frequency_penalty=0, presence_penalty=0.0, logprobs=False, logit_bias={}, tools=[], n=1)


def test_answers_chunks_and_usage_have_openai_shapes():
    job = chat()
    whole = api.completion_body(job, "id1", "text", "stop", 3, 4)
    assert whole["object"] == "chat.completion" and whole["choices"][0]["message"] == \
        {"role": "assistant", "content": "text"}
    assert whole["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    first = api.chunk_body(job, "id1", "", None, first=True)["choices"][0]
    assert first["delta"] == {"role": "assistant", "content": ""} and first["finish_reason"] is None
    assert api.chunk_body(job, "id1", None, "length")["choices"][0] == \
        {"index": 0, "delta": {}, "finish_reason": "length", "logprobs": None}
    assert api.usage_chunk(job, "id1", 3, 4)["choices"] == []
    text_job = api.parse_request("completion", {"model": MODEL, "prompt": "x"}, MODEL)
    assert api.chunk_body(text_job, "id2", "a", None)["choices"][0]["text"] == "a"
    assert api.completion_body(text_job, "id2", "abc", "length", 1, 3)["object"] == "text_completion"
