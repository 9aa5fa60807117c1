"""ChatProvider (llm/client.py) and ProviderConfig (llm/provider_config.py) against a real OpenAI-compatible server
(tests/fakellm.py) over HTTP."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import openai
import pytest
from fakellm import Call, FakeLLM, Reply, fake_embedding, fake_llm

from chapterverse import InputError, ProviderConfig, ProviderError
from chapterverse.errors import ProviderAuthError, ProviderUnreachableError
from chapterverse.llm.client import ChatProvider, StreamEnd, TextDelta, ToolCall
from chapterverse.llm.provider_config import OPENAI_BASE_URL, mask_key, selection_config

USER = [{"role": "user", "content": "Who is Ishmael?"}]
KEY = "sk-test-SECRET-0123456789abcd"
TOOLS = [{"type": "function", "function": {"name": "search", "description": "search the book",
                                            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with fake_llm() as server:
        yield server


def provider(fake: FakeLLM, **options: object) -> ChatProvider:
    settings: dict[str, object] = {"base_url": fake.base_url, "model": "fake-model", "retry_base_s": 0.01}
    settings.update(options)
    return ChatProvider(ProviderConfig(**settings))  # type: ignore[arg-type]


def collect(events: Iterator[object]) -> tuple[list[str], StreamEnd]:
    deltas, end = [], None
    for event in events:
        assert end is None, "nothing may follow StreamEnd"
        if isinstance(event, TextDelta):
            deltas.append(event.text)
        else:
            assert isinstance(event, StreamEnd)
            end = event
    assert end is not None
    return deltas, end


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ----------------------------------------------------------------------------------- happy paths


def test_complete_returns_content_usage_and_sends_what_was_asked(fake: FakeLLM) -> None:
    fake.push(Reply.text("Ishmael narrates [f1-0-7].", usage=(11, 5)))
    result = provider(fake, headers={"X-Trace": "t1"}).complete(USER, max_tokens=50)
    assert result.content == "Ishmael narrates [f1-0-7]."
    assert result.tool_calls == [] and result.finish_reason == "stop"
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (11, 5)  # type: ignore[union-attr]
    sent = fake.chat_requests[0]
    assert sent.json["model"] == "fake-model" and sent.json["messages"] == USER
    assert sent.json["temperature"] == 0 and sent.json["max_tokens"] == 50
    assert "tools" not in sent.json and "response_format" not in sent.json
    assert sent.headers["authorization"] == "Bearer not-needed"  # local servers: no key needed
    assert sent.headers["x-trace"] == "t1"


def test_stream_text_deltas_arrive_in_order_split_mid_tag(fake: FakeLLM) -> None:
    chunks = ["Call me Ish", "mael [f12-3", "4-56] and", " more."]
    fake.push(Reply.text("".join(chunks), chunks=chunks))
    deltas, end = collect(provider(fake).stream(USER))
    assert deltas == chunks
    assert end.content == "".join(chunks) and end.finish_reason == "stop" and end.tool_calls == []
    assert end.usage is not None and end.usage.completion_tokens > 0
    assert fake.chat_requests[0].json["stream_options"] == {"include_usage": True}


def test_stream_yields_deltas_as_they_arrive_not_at_the_end(fake: FakeLLM) -> None:
    fake.push(Reply.text("a" * 25, chunk_size=5, chunk_delay_s=0.15))
    start = time.monotonic()
    events = provider(fake).stream(USER)
    first = next(events)
    first_at = time.monotonic() - start
    collect(events)
    total = time.monotonic() - start
    assert isinstance(first, TextDelta)
    assert first_at < total - 0.4


def test_streamed_parallel_tool_calls_assemble(fake: FakeLLM) -> None:
    fake.push(Reply.tool_calls(Call("search", {"q": "white whale"}, id="call_a"),
                               Call("read", {"tag": "f3-10-200", "context": 2}, id="call_b"),
                               text="Let me look.", chunk_size=4))
    deltas, end = collect(provider(fake).stream(USER, tools=TOOLS, tool_choice="auto"))
    assert "".join(deltas) == "Let me look."
    assert end.finish_reason == "tool_calls"
    assert [(c.id, c.name) for c in end.tool_calls] == [("call_a", "search"), ("call_b", "read")]
    assert json.loads(end.tool_calls[0].arguments) == {"q": "white whale"}
    assert json.loads(end.tool_calls[1].arguments) == {"tag": "f3-10-200", "context": 2}
    sent = fake.chat_requests[0].json
    assert sent["tools"] == TOOLS and sent["tool_choice"] == "auto"


def test_streamed_arguments_really_are_split_across_chunks(fake: FakeLLM) -> None:
    """Guards the fake itself: the assembly test above must exercise fragment joining."""
    fake.push(Reply.tool_call("search", {"q": "white whale"}, chunk_size=3))
    client = openai.OpenAI(base_url=fake.base_url, api_key="x", max_retries=0)
    fragments = [d.function for c in client.chat.completions.create(model="m", messages=USER, stream=True)
                 for ch in c.choices for d in (ch.delta.tool_calls or [])]
    assert fragments[0].name == "search" and fragments[0].arguments == ""
    assert len(fragments) > 3 and all(f.name is None for f in fragments[1:])


def test_malformed_tool_arguments_are_passed_through_raw(fake: FakeLLM) -> None:
    fake.push(Reply.tool_call("search", '{"q": "whale', id="c1"), Reply.tool_call("search", '{"q": ', id="c2"))
    _, end = collect(provider(fake).stream(USER, tools=TOOLS))
    assert end.tool_calls == [ToolCall("c1", "search", '{"q": "whale')]
    result = provider(fake).complete(USER, tools=TOOLS)
    assert result.tool_calls == [ToolCall("c2", "search", '{"q": ')] and result.finish_reason == "tool_calls"


def test_complete_tool_calls_sent_at_one_index_are_kept_apart(fake: FakeLLM) -> None:
    """Some servers send each complete call as one fragment at index 0, each with its own id."""
    def chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
        return {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    calls = [{"index": 0, "id": f"id{n}", "type": "function", "function": {"name": "search", "arguments": f'{{"q": "{n}"}}'}}
             for n in (1, 2)]
    fake.push(Reply.sse([chunk({"tool_calls": [calls[0]]}), chunk({"tool_calls": [calls[1]]}), chunk({}, "tool_calls")]))
    _, end = collect(provider(fake).stream(USER, tools=TOOLS))
    assert [(c.id, c.arguments) for c in end.tool_calls] == [("id1", '{"q": "1"}'), ("id2", '{"q": "2"}')]
    assert end.usage is None


def test_complete_with_tool_calls(fake: FakeLLM) -> None:
    fake.push(Reply.tool_calls(Call("search", {"q": "a"}), Call("search", {"q": "b"})))
    result = provider(fake).complete(USER, tools=TOOLS, response_format={"type": "json_object"})
    assert [json.loads(c.arguments)["q"] for c in result.tool_calls] == ["a", "b"]
    assert result.content == "" and len({c.id for c in result.tool_calls}) == 2
    assert fake.chat_requests[0].json["response_format"] == {"type": "json_object"}


def test_server_rejecting_stream_options_gets_one_plain_retry_then_never_again() -> None:
    with fake_llm(Reply.text("one"), Reply.text("two"), reject_stream_options=True) as fake:
        chat = provider(fake)
        deltas, end = collect(chat.stream(USER))
        assert "".join(deltas) == "one" and end.usage is None
        assert "".join(collect(chat.stream(USER))[0]) == "two"
        assert ["stream_options" in r.json for r in fake.chat_requests] == [True, False, False]


def test_list_models(fake: FakeLLM) -> None:
    fake.models = ["llama3.1:8b", "qwen2.5:7b"]
    assert provider(fake).list_models() == ["llama3.1:8b", "qwen2.5:7b"]


# ------------------------------------------------------------------------------------- retries


def test_429_retry_after_is_honoured_then_success(fake: FakeLLM) -> None:
    fake.push(Reply.error(429, "slow down", retry_after=1), Reply.text("ok"))
    assert provider(fake).complete(USER).content == "ok"
    first, second = fake.chat_requests
    assert 0.9 <= second.at - first.at < 2.5


def test_retry_after_http_date_is_parsed_and_waited(fake: FakeLLM) -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=20), usegmt=True)
    fake.push(Reply.error(503, "busy", retry_after=when), Reply.text("ok"))
    waits: list[float] = []
    chat = ChatProvider(ProviderConfig(base_url=fake.base_url, model="m"), sleep=waits.append)
    assert chat.complete(USER).content == "ok"
    assert len(waits) == 1 and 17 <= waits[0] <= 20


def test_retry_after_beyond_the_cap_gives_up_at_once(fake: FakeLLM) -> None:
    fake.push(Reply.error(429, "quota", retry_after=3600))
    start = time.monotonic()
    with pytest.raises(ProviderError, match=r"rate limiting and asks to wait 3600 s"):
        provider(fake).complete(USER)
    assert time.monotonic() - start < 1 and len(fake.chat_requests) == 1


def test_5xx_beyond_max_retries_raises_after_bounded_attempts(fake: FakeLLM) -> None:
    fake.push(*[Reply.error(500, "model crashed")] * 5)
    with pytest.raises(ProviderError) as caught:
        provider(fake, max_retries=2).complete(USER)
    assert type(caught.value) is ProviderError
    assert str(caught.value) == f"{fake.base_url} answered HTTP 500: model crashed"
    assert len(fake.chat_requests) == 3


def test_backoff_grows_exponentially_with_jitter(fake: FakeLLM) -> None:
    fake.push(*[Reply.error(502, "bad gateway")] * 4)
    waits: list[float] = []
    config = ProviderConfig(base_url=fake.base_url, model="m", max_retries=3, retry_base_s=1.0)
    with pytest.raises(ProviderError):
        ChatProvider(config, sleep=waits.append).complete(USER)
    assert len(waits) == 3
    for n, wait in enumerate(waits):
        assert 2 ** n * 0.5 <= wait <= 2 ** n


def test_4xx_is_not_retried_and_message_is_one_line(fake: FakeLLM) -> None:
    fake.push(Reply.error(400, "context length\nexceeded:  9000 > 8192"))
    with pytest.raises(ProviderError) as caught:
        provider(fake).complete(USER)
    assert str(caught.value) == f"{fake.base_url} answered HTTP 400: context length exceeded: 9000 > 8192"
    assert len(fake.chat_requests) == 1


def test_404_names_the_model_and_hints_at_v1(fake: FakeLLM) -> None:
    fake.push(Reply.error(404, "model 'nope' not found"))
    chat = ChatProvider(ProviderConfig(base_url=fake.url, model="nope"))
    with pytest.raises(ProviderError, match=r"is model 'nope' available\? \(does the base URL need to end in /v1\?\)"):
        chat.complete(USER)


def test_unreachable_port_fails_fast_naming_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    start = time.monotonic()
    with pytest.raises(ProviderUnreachableError) as caught:
        ChatProvider(ProviderConfig(base_url=url, model="m", max_retries=3)).complete(USER)
    assert time.monotonic() - start < 2.0
    assert str(caught.value).startswith(f"cannot reach {url}: ")
    assert "refused" in str(caught.value).lower()


def test_unreachable_stream_raises_unreachable_too() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ProviderUnreachableError, match="cannot reach"):
        list(ChatProvider(ProviderConfig(base_url=url, model="m", retry_base_s=0.01)).stream(USER))


def test_hang_times_out_within_bounded_time(fake: FakeLLM) -> None:
    fake.push(Reply.hang(10), Reply.hang(10))
    start = time.monotonic()
    with pytest.raises(ProviderUnreachableError, match=r"no answer within 0.4 s"):
        provider(fake, timeout_s=0.4, max_retries=1).complete(USER)
    assert time.monotonic() - start < 2.5
    assert len(fake.chat_requests) == 2


def test_stream_stalling_after_text_raises_interrupted(fake: FakeLLM) -> None:
    fake.push(Reply.hang(10, text="Ishmael is the narrator", after_chunks=2))
    seen: list[str] = []
    with pytest.raises(ProviderError, match="interrupted after 10 characters") as caught:
        for event in provider(fake, timeout_s=0.4).stream(USER):
            seen.append(event.text)  # type: ignore[union-attr]
    assert seen == ["Ishma", "el is"] and not isinstance(caught.value, ProviderUnreachableError)
    assert len(fake.chat_requests) == 1


# ---------------------------------------------------------------------------------- mid-stream


def test_drop_mid_stream_raises_provider_error_without_retry(fake: FakeLLM) -> None:
    fake.push(Reply.drop("The whale is white and large", after_chunks=3), Reply.text("never sent"))
    seen: list[str] = []
    with pytest.raises(ProviderError, match=r"stream from .* interrupted after 15 characters"):
        for event in provider(fake).stream(USER):
            seen.append(event.text)  # type: ignore[union-attr]
    assert "".join(seen) == "The whale is wh"
    assert len(fake.chat_requests) == 1


def test_drop_before_the_first_delta_is_retried(fake: FakeLLM) -> None:
    fake.push(Reply.drop(after_chunks=0), Reply.error(503, "warming up"), Reply.text("whole answer"))
    deltas, end = collect(provider(fake).stream(USER))
    assert "".join(deltas) == "whole answer" == end.content
    assert len(fake.chat_requests) == 3


def test_stream_ending_without_finish_reason_is_interrupted(fake: FakeLLM) -> None:
    chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": {"content": "half an ans"}, "finish_reason": None}]}
    fake.push(Reply.sse([chunk], done=False))
    with pytest.raises(ProviderError, match="interrupted after 11 characters: the stream ended without a finish_reason"):
        list(provider(fake).stream(USER))


def test_error_event_inside_the_stream_is_a_provider_error(fake: FakeLLM) -> None:
    fake.push(*[Reply.sse([{"error": {"message": "overloaded", "type": "server_error"}}])] * 2)
    with pytest.raises(ProviderError, match="overloaded"):
        list(provider(fake, max_retries=1).stream(USER))
    assert len(fake.chat_requests) == 1


# ------------------------------------------------------------------------------------- secrets


def test_401_is_an_auth_error_that_never_shows_the_key(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with fake_llm(api_key="the-right-key") as fake:
        with pytest.raises(ProviderAuthError) as caught:
            provider(fake, api_key=KEY).complete(USER)
        assert str(caught.value) == (f"{fake.base_url} rejected the API key (HTTP 401); "
                                     "set --llm-api-key or CHAPTERVERSE_LLM_API_KEY")
        assert len(fake.chat_requests) == 1
        assert fake.chat_requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in caplog.text and KEY not in repr(caught.value)


def test_a_key_echoed_by_the_server_is_scrubbed(fake: FakeLLM, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake.push(*[Reply.error(500, f"invalid token {KEY} for org")] * 2)
    with pytest.raises(ProviderError) as caught:
        provider(fake, api_key=KEY, max_retries=1).complete(USER)
    assert KEY not in str(caught.value) and mask_key(KEY) in str(caught.value)
    assert KEY not in caplog.text
    assert "retrying in" in caplog.text


def test_403_is_an_auth_error(fake: FakeLLM) -> None:
    fake.push(Reply.error(403, "forbidden"))
    with pytest.raises(ProviderAuthError, match=r"HTTP 403"):
        provider(fake).complete(USER)


def test_repr_masks_the_key_and_secret_headers() -> None:
    config = ProviderConfig(base_url="https://llm.example/v1/", model="m", api_key=KEY,
                            headers={"Authorization": "Bearer zzz-secret", "X-Title": "chapterverse"})
    text = repr(config)
    assert KEY not in text and "zzz-secret" not in text and str(config) == text
    assert "api_key=sk-…abcd" in text and "'X-Title': 'chapterverse'" in text
    assert config.base_url == "https://llm.example/v1"
    assert mask_key("short") == "***" and mask_key(None) == "None"


# -------------------------------------------------------------------------------------- config


def test_nothing_configured_means_no_llm() -> None:
    assert ProviderConfig.resolve(env={}) is None
    assert ProviderConfig.resolve(env={}, config={"api_key_env": "SOME_KEY", "timeout_s": 5}) is None


def test_precedence_flags_over_env_over_openai_env_over_file() -> None:
    file = {"base_url": "http://file:1/v1", "model": "file-model", "api_key": "file-key", "timeout_s": 7,
            "headers": {"X-A": "1"}, "max_retries": 1}
    env = {"CHAPTERVERSE_LLM_BASE_URL": "http://cv-env:1/v1", "CHAPTERVERSE_LLM_MODEL": "env-model",
           "CHAPTERVERSE_LLM_API_KEY": "env-key", "OPENAI_BASE_URL": "http://openai-env:1/v1",
           "OPENAI_API_KEY": "openai-key"}
    flags = ProviderConfig.resolve(base_url="http://flag:1/v1", model="flag-model", api_key="flag-key",
                                   config=file, env=env)
    assert flags is not None
    assert (flags.base_url, flags.model, flags.api_key) == ("http://flag:1/v1", "flag-model", "flag-key")
    assert (flags.timeout_s, flags.max_retries, dict(flags.headers)) == (7.0, 1, {"X-A": "1"})

    from_env = ProviderConfig.resolve(config=file, env=env)
    assert from_env is not None
    assert (from_env.base_url, from_env.model, from_env.api_key) == ("http://cv-env:1/v1", "env-model", "env-key")
    assert from_env.api_key_env == "CHAPTERVERSE_LLM_API_KEY"

    openai_env = {k: v for k, v in env.items() if k.startswith("OPENAI")}
    from_openai = ProviderConfig.resolve(config=file, env=openai_env)
    assert from_openai is not None
    assert (from_openai.base_url, from_openai.model, from_openai.api_key) == (
        "http://openai-env:1/v1", "file-model", "openai-key")

    from_file = ProviderConfig.resolve(config=file, env={})
    assert from_file is not None
    assert (from_file.base_url, from_file.model, from_file.api_key) == ("http://file:1/v1", "file-model", "file-key")


def test_openai_key_alone_defaults_to_openai_but_needs_a_model() -> None:
    with pytest.raises(InputError, match="set --llm-model or CHAPTERVERSE_LLM_MODEL"):
        ProviderConfig.resolve(env={"OPENAI_API_KEY": "sk-x"})
    config = ProviderConfig.resolve(model="gpt-4o-mini", env={"OPENAI_API_KEY": "sk-x"})
    assert config is not None and config.base_url == OPENAI_BASE_URL and config.api_key == "sk-x"


def test_endpoint_without_model_names_the_fix() -> None:
    with pytest.raises(InputError, match=r"http://localhost:11434/v1.*set --llm-model or CHAPTERVERSE_LLM_MODEL"):
        ProviderConfig.resolve(base_url="http://localhost:11434/v1", env={})


def test_openai_without_key_names_the_fix() -> None:
    with pytest.raises(InputError, match="needs an API key; set --llm-api-key or CHAPTERVERSE_LLM_API_KEY"):
        ProviderConfig.resolve(model="gpt-4o", env={})


def test_local_server_needs_no_key_and_openai_key_does_not_leak_to_it() -> None:
    config = ProviderConfig.resolve(base_url="http://localhost:11434/v1", model="llama3.1",
                                    env={"OPENAI_API_KEY": "sk-global"})
    assert config is not None and config.api_key is None


def test_key_from_the_env_var_named_in_the_config_file() -> None:
    file = {"base_url": "https://api.together.xyz/v1", "model": "m", "api_key_env": "TOGETHER_API_KEY"}
    config = ProviderConfig.resolve(config=file, env={"TOGETHER_API_KEY": "tg-123"})
    assert config is not None and (config.api_key, config.api_key_env) == ("tg-123", "TOGETHER_API_KEY")
    with pytest.raises(InputError, match=r"\$TOGETHER_API_KEY, which is not set; export TOGETHER_API_KEY"):
        ProviderConfig.resolve(config=file, env={})


def test_bad_config_values_are_input_errors() -> None:
    with pytest.raises(InputError, match="unknown LLM config key.*modle.*valid keys"):
        ProviderConfig.resolve(config={"modle": "x"}, env={})
    with pytest.raises(InputError, match="timeout_s must be a number"):
        ProviderConfig.resolve(config={"model": "m", "base_url": "http://h/v1", "timeout_s": "soon"}, env={})
    with pytest.raises(InputError, match="not an http"):
        ProviderConfig.resolve(base_url="localhost:11434", model="m", env={})


def test_with_model_and_selection_config() -> None:
    main = ProviderConfig(base_url="http://h/v1", model="big", api_key=KEY)
    assert main.with_model("small") == ProviderConfig(base_url="http://h/v1", model="small", api_key=KEY)
    assert selection_config(main, env={}) is main
    assert selection_config(main, env={"CHAPTERVERSE_SELECTION_MODEL": "tiny"}).model == "tiny"  # type: ignore[union-attr]
    assert selection_config(main, model="flag", env={"CHAPTERVERSE_SELECTION_MODEL": "tiny"}).model == "flag"  # type: ignore[union-attr]
    assert selection_config(None, model="x", env={}) is None


# ---------------------------------------------------------------------------------- fake sanity


def test_official_sdk_streams_text_and_embeds_from_the_fake(fake: FakeLLM) -> None:
    fake.push(Reply.text("Call me Ishmael."))
    client = openai.OpenAI(base_url=fake.base_url, api_key="x", max_retries=0)
    stream = client.chat.completions.create(model="m", messages=USER, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Call me Ishmael."
    assert chunks[-1].usage is not None and chunks[-1].choices == []

    base64_default = client.embeddings.create(model="e", input=["a", "b"])
    floats = client.embeddings.create(model="e", input="a", encoding_format="float", dimensions=8)
    assert len(base64_default.data) == 2 and len(base64_default.data[0].embedding) == 16
    assert base64_default.data[0].embedding == pytest.approx(fake_embedding("a", 16, "e"), abs=1e-6)
    assert floats.data[0].embedding == pytest.approx(fake_embedding("a", 8, "e"))
    assert fake_embedding("a", 8, "e") != fake_embedding("b", 8, "e")


def test_handler_and_exhausted_script() -> None:
    seen: list[str] = []

    def handler(body: dict[str, object]) -> Reply:
        seen.append(str(body["model"]))
        return Reply.text(f"echo {body['model']}")

    with fake_llm(handler=handler) as fake:
        assert provider(fake).complete(USER).content == "echo fake-model" and seen == ["fake-model"]
    with fake_llm() as fake, pytest.raises(ProviderError, match="HTTP 418: fakellm: the script has no reply left"):
        provider(fake).complete(USER)
