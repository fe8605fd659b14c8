"""Configure rejects numbers beyond 2^53 (docs/decisions.md#d5), including values that
arrive as doubles, and an API key an HTTP header cannot carry (a newline) is a PERMANENT
configuration error: INVALID_ARGUMENT at Configure naming the field, a clear usage error at
start-up from the environment, never a retryable TRANSIENT on the first request."""

from __future__ import annotations

import httpx
import pytest

from protocol_py.cli import main
from protocol_py.codec.structs import to_struct
from protocol_py.providers.http.base import check_api_key
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py.server.config_schema import inexact_numbers
from protocol_py_gen.google.protobuf import Struct, Value
from protocol_py_gen.model.v1 import ConfigureRequest, StopReason, StreamEvent

from .conftest import Captured, Served, acall, request, serve, still_serving

SECRET = "sk-live-abc123"


def number_config(**fields: float) -> bytes:
    """A ConfigureRequest whose numbers travel as doubles (as every Struct number does)."""
    return bytes(
        ConfigureRequest(
            config=Struct(fields={k: Value(number_value=v) for k, v in fields.items()})
        )
    )


async def stop_of_a_long_answer(served: Served) -> StopReason:
    result = await acall(
        served.address, "StreamCompletion", bytes(request("Hello there " * 20)), stream=True
    )
    event = StreamEvent.parse(result.replies[-1])
    assert event.stop is not None, event
    return event.stop.reason


@pytest.mark.parametrize("value", [float(2**60), 1e20, -1e300, float(2**53 + 2)])
async def test_configure_rejects_a_double_beyond_2_53_and_keeps_the_config(
    served: Served, logs: Captured, value: float
) -> None:
    good = await acall(served.address, "Configure", number_config(max_tokens=10))
    assert good.code == "OK", good
    assert await stop_of_a_long_answer(served) == StopReason.MAX_TOKENS
    result = await acall(served.address, "Configure", number_config(max_tokens=value))
    assert result.code == "INVALID_ARGUMENT", result
    assert result.details == (
        "invalid config: 1 error(s): /max_tokens: number beyond 2^53 "
        "(json.integer_beyond_2_53): a google.protobuf.Value double cannot carry it exactly"
    )
    assert repr(value) not in result.details
    assert await stop_of_a_long_answer(served) == StopReason.MAX_TOKENS  # previous config kept
    assert logs.errors() == []


async def test_configure_accepts_2_53_itself(served: Served) -> None:
    result = await acall(served.address, "Configure", number_config(max_tokens=float(2**53)))
    assert "2^53" not in result.details


def test_inexact_numbers_names_every_path_at_any_depth() -> None:
    config = {"a": 2**53, "b": {"c": [1, float(2**54)]}, "d": 1e300, "e": True, "f": "1e300"}
    assert inexact_numbers(config) == [
        "/b/c/1: number beyond 2^53 (json.integer_beyond_2_53): a google.protobuf.Value "
        "double cannot carry it exactly",
        "/d: number beyond 2^53 (json.integer_beyond_2_53): a google.protobuf.Value double "
        "cannot carry it exactly",
    ]


@pytest.mark.parametrize(
    ("key", "named"),
    [
        (SECRET + "\n", "a newline"),
        ("sk-live\r\nX-Injected: 1", "a carriage return"),
        ("sk live", "a space"),
        ("sk-\x00", "the character U+0000"),
        ("sk-é", "the character U+00E9"),
    ],
)
def test_check_api_key_names_the_field_and_the_character_never_the_key(
    key: str, named: str
) -> None:
    with pytest.raises(ValueError, match=r"^api_key: the API key holds ") as info:
        check_api_key(key, "api_key")
    assert named in str(info.value)
    assert "sk-live" not in str(info.value)
    assert check_api_key(SECRET, "api_key") == SECRET


def _no_network(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"the upstream was called: {request.url}")


async def test_configure_api_key_with_newline_is_invalid_argument(logs: Captured) -> None:
    provider = OpenAIProvider(api_key="sk-old", transport=httpx.MockTransport(_no_network))
    run = await serve(provider)
    try:
        body = bytes(ConfigureRequest(config=to_struct({"api_key": SECRET + "\n"})))
        result = await acall(run.address, "Configure", body)
        assert result.code == "INVALID_ARGUMENT", result
        assert result.details == (
            "config rejected by the provider: api_key: the API key holds a newline; an HTTP "
            "header can carry only visible ASCII characters (0x21-0x7E)"
        )
        assert provider.api_key == "sk-old"  # nothing applied
        assert all(SECRET not in r.getMessage() for r in logs.records)
        assert logs.errors() == []
        ok = await acall(
            run.address, "Configure", bytes(ConfigureRequest(config=to_struct({"api_key": SECRET})))
        )
        assert ok.code == "OK"
        assert provider.api_key == SECRET
    finally:
        await run.server.shutdown(grace_period=0)


def test_env_api_key_with_newline_is_refused_at_start_up() -> None:
    with pytest.raises(ValueError, match=r"^OPENAI_API_KEY: the API key holds a newline"):
        OpenAIProvider.from_cli(
            base_url=None, discover=False, env={"OPENAI_API_KEY": SECRET + "\n"}
        )


def test_cli_serve_exits_with_a_usage_error_for_a_newline_in_the_env_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET + "\n")
    status = main(["serve", "--provider", "openai", "--port", "0"])
    err = capsys.readouterr().err
    assert status == 2
    assert "OPENAI_API_KEY: the API key holds a newline" in err
    assert SECRET not in err


async def test_server_still_serves_after_rejected_configs(served: Served) -> None:
    await acall(served.address, "Configure", number_config(max_tokens=1e20))
    await still_serving(served)
