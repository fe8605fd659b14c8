"""``client.parse_address``: ASCII ports 1-65535, bracketed IPv6, typed errors."""

from __future__ import annotations

import pytest

from protocol_py.client.client import ModelClient, parse_address
from protocol_py.errors import InvalidValueError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:50051", ("127.0.0.1", 50051)),
        ("[::1]:7", ("::1", 7)),
        ("[::1]", ("::1", 50051)),
        ("localhost", ("localhost", 50051)),
        ("example.com:65535", ("example.com", 65535)),
        ("host:1", ("host", 1)),
    ],
)
def test_parse_address_accepts_host_port_and_bracketed_ipv6(
    text: str, expected: tuple[str, int]
) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "[::1",  # no closing bracket
        "[::1]x",  # junk after the bracket
        "[]:5",  # empty host
        "a:b:c",  # unbracketed IPv6-like
        "::1",  # IPv6 must be bracketed
        "host:\uff15\uff10\uff10\uff15\uff11",  # full-width digits
        "host:0",
        "host:65536",
        "host:-1",
        "host:",
        ":5",
        "",
        "ho st:5",
    ],
)
def test_parse_address_rejects_malformed_addresses(text: str) -> None:
    with pytest.raises(InvalidValueError) as info:
        parse_address(text)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize("value", [None, 5, b"host:1"])
def test_parse_address_rejects_non_strings(value: object) -> None:
    with pytest.raises(InvalidValueError) as info:
        parse_address(value)  # type: ignore[arg-type]
    assert "address" in str(info.value)


@pytest.mark.parametrize("request_value", [None, {}, "hi"])
async def test_client_complete_and_stream_reject_a_non_request(
    client: ModelClient, request_value: object
) -> None:
    with pytest.raises(InvalidValueError) as info:
        await client.complete(request_value)  # type: ignore[arg-type]
    assert "complete: expected a StreamCompletionRequest" in str(info.value)
    with pytest.raises(InvalidValueError) as info:
        async for _ in client.stream(request_value):  # type: ignore[arg-type]
            pass
    assert "stream: expected a StreamCompletionRequest" in str(info.value)
