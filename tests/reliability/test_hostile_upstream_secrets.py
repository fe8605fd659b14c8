"""Credentials in a base URL and encoded keys.

* ``base_url`` / ``--base-url`` with userinfo (``http://alice:pass@host``) would make httpx send
  ``Authorization: Basic ...`` instead of the API key, for an upstream to echo. So userinfo is
  refused up front (Configure: INVALID_ARGUMENT naming ``base_url``; ``serve``: exit 2), the value
  never echoed; nothing is applied.
* An upstream echoing ENCODED copies of the key (percent-encoded, standard and URL-safe base64 of
  the key, of ``Bearer <key>`` and of ``<user>:<key>``, hex): no event field and no log record at
  any level lets the key be recovered.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from urllib.parse import quote, unquote

import pytest

from protocol_py import cli
from protocol_py.codec.structs import to_struct
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py_gen.model.v1 import ConfigureRequest, ErrorKind, StreamEvent

from ..providers.test_providers_stub import MODEL, request
from ..support.stub_upstream import Reply, StubUpstream
from .conftest import acall, serve

KEY = "gw+K3y/with=Sl4sh+plus/x9=="
"""A key holding ``+``, ``/`` and ``=``: its percent-encoding and base64 differ from URL-safe
forms, and no vendor-key shape (``sk-``) catches it."""
USERINFO_URL = "http://alice:s3cretPassw0rd@127.0.0.1:9/v1"
OK_BODY = (
    b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"fine"}}]}\n\n'
    b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def _ok() -> Reply:
    return Reply(headers={"content-type": "text/event-stream"}, chunks=[OK_BODY])


def _recoverable(text: str) -> bool:
    """True when ``text`` lets the key be read back: literally, percent-decoded, or decoded
    from any run of hex or (standard / URL-safe) base64 characters in it, at any alignment.
    The probe looks for the key without its first and last 2 characters (what may stay
    visible at the edges of a redacted base64 run, mixed with the bytes around it)."""
    core = KEY[2:-2]
    if core.lower() in text.lower() or core.lower() in unquote(text).lower():
        return True
    needle = core.encode()
    for run in re.findall(r"[0-9A-Fa-f]{8,}", text):
        for start in (0, 1):
            part = run[start:]
            part = part[: len(part) // 2 * 2]
            if needle in binascii.unhexlify(part):
                return True
    for run in re.findall(r"[A-Za-z0-9+/_-]{8,}", text):
        for start in range(4):
            part = run[start:]
            part = part[: len(part) // 4 * 4]
            decoded = base64.b64decode(part.replace("-", "+").replace("_", "/") + "==")
            if needle in decoded:
                return True
    return False


def test_the_leak_probe_finds_every_encoding() -> None:
    """The probe itself: every encoding listed is recoverable before redaction."""
    for text in _encodings():
        assert _recoverable(f"x {text} y"), text
    assert not _recoverable("nothing to see here")


def _encodings() -> list[str]:
    raw = KEY.encode()
    return [
        quote(KEY, safe=""),
        base64.b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode(),
        base64.b64encode(b"Bearer " + raw).decode(),
        base64.urlsafe_b64encode(b"alice:" + raw).decode(),
        base64.b64encode(b"ab:" + raw).decode().rstrip("="),
        raw.hex(),
        raw.hex().upper(),
    ]


def _event_text(events: list[StreamEvent]) -> str:
    return "\n".join(json.dumps(e.to_dict()) for e in events)


async def test_userinfo_in_base_url_is_invalid_argument_at_configure_never_echoed() -> None:
    async with StubUpstream() as stub:
        provider = OpenAIProvider(api_key="k" * 20, base_url=stub.url + "/v1")
        served = await serve(provider)
        try:
            body = bytes(ConfigureRequest(config=to_struct({"base_url": USERINFO_URL})))
            result = await acall(served.address, "Configure", body)
            assert result.code == "INVALID_ARGUMENT", result
            assert "base_url: credentials in the URL (user:password@host) are not allowed" in (
                result.details
            )
            assert "alice" not in result.details and "s3cret" not in result.details
            # nothing applied: the next stream still goes to the old URL, without userinfo
            stub.queue(_ok())
            streamed = await acall(
                served.address, "StreamCompletion", bytes(request(MODEL["openai"])), stream=True
            )
            assert streamed.code == "OK", streamed
            events = [StreamEvent.parse(r) for r in streamed.replies]
            assert events[-1].stop is not None
            assert stub.seen[-1].headers["authorization"] == "Bearer " + "k" * 20
        finally:
            await served.server.shutdown(grace_period=0)
            await provider.aclose()


def test_userinfo_in_base_url_makes_serve_exit_2_never_echoed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = cli.main(["serve", "--provider", "openai", "--base-url", USERINFO_URL])
    assert status == 2
    err = capsys.readouterr().err
    assert "--base-url: credentials in the URL (user:password@host) are not allowed" in err
    assert "alice" not in err and "s3cret" not in err


async def test_encoded_copies_of_the_key_never_reach_an_event_or_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    for name in ("httpx", "httpcore", "protocol_py"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    encodings = _encodings()
    message = "bad credentials: " + " | ".join(encodings)
    error_body = json.dumps({"error": {"message": message, "code": encodings[1]}}).encode()
    echo_headers = {
        "content-type": "application/json",
        "x-request-id": encodings[3],  # base64("Bearer <key>")
        "x-echo": encodings[4],  # httpcore logs response headers at DEBUG
    }
    stream_headers = {"content-type": "text/event-stream", "x-request-id": encodings[0]}
    try:
        async with StubUpstream() as stub:
            stub.queue(Reply(status=401, headers=echo_headers, chunks=[error_body]))
            stub.queue(Reply(headers=stream_headers, chunks=[OK_BODY]))
            provider = OpenAIProvider(api_key=KEY, base_url=stub.url)
            served = await serve(provider)
            try:
                failed = await acall(
                    served.address,
                    "StreamCompletion",
                    bytes(request(MODEL["openai"])),
                    stream=True,
                )
                # still serving: a normal stream afterwards, its echoed request id redacted
                ok = await acall(
                    served.address,
                    "StreamCompletion",
                    bytes(request(MODEL["openai"])),
                    stream=True,
                )
            finally:
                await served.server.shutdown(grace_period=0)
                await provider.aclose()
    finally:
        for name in ("httpx", "httpcore", "protocol_py"):
            logging.getLogger(name).setLevel(logging.NOTSET)
    events = [StreamEvent.parse(r) for r in failed.replies]
    error = events[-1].error
    assert error is not None and error.kind == ErrorKind.AUTHENTICATION
    assert error.message.startswith("bad credentials: <redacted> | ")
    assert error.message.count("<redacted>") == len(encodings)
    for text in (_event_text(events), error.message, error.vendor_code or ""):
        assert not _recoverable(text), text
    assert error.provider_request_id is not None
    assert not _recoverable(error.provider_request_id)
    good = [StreamEvent.parse(r) for r in ok.replies]
    assert good[-1].stop is not None
    assert good[0].stream_start is not None
    assert good[0].stream_start.provider_request_id == "<redacted>"
    lines = [record.getMessage() for record in caplog.records]
    assert any("x-echo" in line.lower() for line in lines), "httpcore's header record is missing"
    for line in lines:
        assert not _recoverable(line), line
