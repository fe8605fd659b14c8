"""Upstream failures name the URL (never its credentials) and the cause in words; a base URL
that is not the vendor's own discovers the upstream's models by default."""

from __future__ import annotations

import json
import logging
import socket
import ssl

import httpx
import pytest

from protocol_py.provider import ProviderStartError
from protocol_py.providers.http.base import HTTPProvider, Timeouts
from protocol_py.providers.http.errors import transport_cause
from protocol_py.providers.http.url import safe_location
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py.server.serve import FRAME_LOGGERS, configure_logging
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import ErrorKind, StreamCompletionRequest

from ...support.stub_upstream import Reply, StubUpstream


def _chained(outer: Exception, inner: BaseException) -> Exception:
    outer.__cause__ = inner
    return outer


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # closed again: nothing listens there


def _request(model: str) -> StreamCompletionRequest:
    return StreamCompletionRequest(
        model_id=model,
        messages=[Message(role=Role.USER, content=[ContentBlock(text=TextBlock(text="hi"))])],
    )


def test_cause_of_a_dns_failure_names_the_host() -> None:
    exc = _chained(httpx.ConnectError("x"), socket.gaierror(-2, "Name or service not known"))
    assert transport_cause(exc, host="api.example.invalid") == (
        "DNS lookup failed for api.example.invalid"
    )


def test_cause_of_an_untrusted_certificate() -> None:
    inner = ssl.SSLCertVerificationError(1, "certificate verify failed")
    inner.verify_message = "self-signed certificate"
    exc = _chained(httpx.ConnectError("x"), inner)
    assert transport_cause(exc) == "TLS certificate not trusted (self-signed certificate)"


def test_cause_of_a_connect_timeout_gives_the_seconds() -> None:
    exc = httpx.ConnectTimeout("")
    assert transport_cause(exc, connect_timeout_s=2.5) == "timed out after 2.5 s while connecting"


def test_cause_of_an_unknown_failure_is_its_type_and_text() -> None:
    assert transport_cause(httpx.ProxyError("proxy said no")) == "ProxyError: proxy said no"


def test_safe_location_drops_userinfo_and_query() -> None:
    assert safe_location("https://user:pw@host.example/v1/models?key=SECRET") == (
        "https://host.example:443/v1/models"
    )


async def test_refused_connection_names_url_and_cause_never_the_query() -> None:
    port = _free_port()
    provider = OpenAIProvider(
        api_key="sk-secretsecret",
        base_url=f"http://127.0.0.1:{port}/v1?token=QUERYSECRET",
        timeouts=Timeouts(connect_timeout_s=5),
    )
    model = provider.catalog()[0].id
    events = [e async for e in provider.stream(_request(model), CallContext())]
    await provider.aclose()
    errors = [e.error for e in events if e.error is not None]
    assert len(errors) == 1
    assert errors[0].kind == ErrorKind.TRANSIENT and errors[0].retryable
    assert errors[0].message == (
        f"upstream request to http://127.0.0.1:{port}/v1/chat/completions failed: "
        "connection refused"
    )


def test_discovery_is_on_for_a_foreign_base_url_and_off_for_the_vendor_url() -> None:
    local = OpenAIProvider.from_cli(base_url="http://127.0.0.1:8000/v1", discover=None, env={})
    vendor = OpenAIProvider.from_cli(base_url=None, discover=None, env={})
    same = OpenAIProvider.from_cli(
        base_url=OpenAIProvider.default_base_url + "/", discover=None, env={}
    )
    kept = OpenAIProvider.from_cli(base_url="http://127.0.0.1:8000/v1", discover=False, env={})
    assert isinstance(local, HTTPProvider) and local.discover is True
    assert isinstance(vendor, HTTPProvider) and vendor.discover is False
    assert isinstance(same, HTTPProvider) and same.discover is False
    assert isinstance(kept, HTTPProvider) and kept.discover is False


async def test_a_local_upstream_serves_only_its_own_models(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listing = {"object": "list", "data": [{"id": "qwen3-8b"}, {"id": "llama-4-scout"}]}
    async with StubUpstream() as stub:
        stub.queue(
            Reply(
                headers={"content-type": "application/json"}, chunks=[json.dumps(listing).encode()]
            )
        )
        provider = OpenAIProvider.from_cli(base_url=stub.url + "/v1", discover=None, env={})
        assert isinstance(provider, OpenAIProvider)
        with caplog.at_level(logging.INFO, logger="protocol_py.providers"):
            await provider.start()
        await provider.aclose()
    ids = [m.id for m in provider.capabilities().models]
    assert ids == ["qwen3-8b", "llama-4-scout"]
    port = stub.url.rsplit(":", 1)[1]
    assert (
        f"provider openai: serving 2 models from the upstream's own model list (discovered) "
        f"at http://127.0.0.1:{port}/v1" in caplog.messages
    )


async def test_a_local_upstream_with_an_empty_list_is_a_start_up_error() -> None:
    async with StubUpstream() as stub:
        stub.queue(Reply(headers={"content-type": "application/json"}, chunks=[b'{"data": []}']))
        provider = OpenAIProvider.from_cli(base_url=stub.url, discover=None, env={})
        with pytest.raises(ProviderStartError, match=r"GET http://127\.0\.0\.1:\d+/models listed"):
            await provider.start()
        await provider.aclose()


async def test_no_discover_keeps_the_vendor_catalog(caplog: pytest.LogCaptureFixture) -> None:
    provider = OpenAIProvider.from_cli(base_url="http://127.0.0.1:9/v1", discover=False, env={})
    with caplog.at_level(logging.INFO, logger="protocol_py.providers"):
        await provider.start()
    await provider.aclose()
    catalog = [m.id for m in provider.catalog()]
    assert [m.id for m in provider.capabilities().models] == catalog
    assert any("from the built-in openai catalog (no discovery)" in m for m in caplog.messages)


def test_configure_logging_holds_frame_loggers_at_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    level = root.level
    try:
        configure_logging("DEBUG")
        assert [logging.getLogger(n).level for n in FRAME_LOGGERS] == [logging.WARNING] * 4
        root.handlers = []
        configure_logging("DEBUG", frame_logs=True)
        assert [logging.getLogger(n).getEffectiveLevel() for n in FRAME_LOGGERS] == [
            logging.DEBUG
        ] * 4
    finally:
        root.setLevel(level)
        for name in FRAME_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)
