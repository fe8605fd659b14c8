"""Configure's ``uri`` format follows RFC 3986 absolute-URI syntax:
any scheme is accepted (``file:``, ``urn:``), malformed strings are refused with the path; no
format is checked on a string over MAX_FORMAT_CHARS characters."""

from __future__ import annotations

import pytest

from protocol_py.server import config_schema, validate_config

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


@pytest.mark.parametrize("fmt", ["uri", "uri-reference", "email", "ipv4", "date", "regex", "uuid"])
def test_no_format_is_checked_on_a_string_over_the_bound(
    fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every format fails, unchecked, on a string over MAX_FORMAT_CHARS characters, naming the
    bound; at the bound a valid value still passes. The checks run over the whole string in
    one call (rfc3986-validator's took about 120 bytes of memory per character)."""
    seen: list[int] = []
    validate = config_schema.validate_rfc3986

    def recorded(value: str, rule: str) -> object:
        seen.append(len(value))
        return validate(value, rule=rule)

    monkeypatch.setattr(config_schema, "validate_rfc3986", recorded)
    schema = {"type": "object", "properties": {"v": {"type": "string", "format": fmt}}}
    bound = config_schema.MAX_FORMAT_CHARS
    over = validate_config(schema, {"v": "a" * (bound + 1)})
    assert over == [
        f"/v: is not a valid {fmt!r}: longer than {bound} characters (bound MAX_FORMAT_CHARS), "
        "not checked"
    ]
    assert validate_config(schema, {"v": "x" * 8_000_000}) == over
    assert all(size <= bound for size in seen)
    if fmt == "uri":
        at_bound = "https://example.com/" + "a" * (bound - len("https://example.com/"))
        assert validate_config(SCHEMA, {"u": at_bound}) == []
        assert seen[-1] == bound
