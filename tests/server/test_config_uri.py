"""Configure's ``uri`` format follows RFC 3986 absolute-URI syntax:
any scheme is accepted (``file:``, ``urn:``), malformed strings are refused with the path."""

from __future__ import annotations

import pytest

from protocol_py.server import validate_config

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"u": {"type": "string", "format": "uri"}},
}


@pytest.mark.parametrize(
    "uri",
    [
        "http://x",
        "https://api.example.com/v1",
        "file:///etc/passwd",
        "urn:isbn:0451450523",
        "mailto:someone@example.com",
        "http://[::1]:8080/v1",
        "http://127.0.0.1:9/v1?x=1#frag",
    ],
)
def test_uri_format_accepts_rfc3986_absolute_uris(uri: str) -> None:
    assert validate_config(SCHEMA, {"u": uri}) == []


@pytest.mark.parametrize(
    "uri",
    [
        "not a url",
        "http//x",
        "://x",
        "",
        "/relative/path",
        "http://a b",
        "http://x/%zz",
        "1http://x",
    ],
)
def test_uri_format_refuses_malformed_uris(uri: str) -> None:
    assert validate_config(SCHEMA, {"u": uri}) == ["/u: is not a valid 'uri'"]
