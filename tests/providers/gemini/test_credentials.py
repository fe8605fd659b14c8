"""Credentials of the gemini and vertex providers, offline: a missing key or missing Vertex
credentials fail the call locally (nothing reaches the upstream) after a start-up warning
naming what to set; Application Default Credentials (a ``GOOGLE_APPLICATION_CREDENTIALS`` file,
gcloud's well-known file) and authorized-user refresh-token files get their token from the
overridden token endpoint of the stub; a refused refresh is AUTHENTICATION without any secret
(docs/adapters.md "Gemini")."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from grpclib.exceptions import GRPCError

from protocol_py.provider import ProviderError
from protocol_py.providers.gemini.auth import NO_CREDENTIALS, VertexCredentials
from protocol_py.providers.gemini.provider import NO_API_KEY, GeminiProvider, VertexProvider
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import ErrorKind, StreamCompletionRequest, StreamEvent

from ...support.adapters import served_client
from ._gemini import GeminiStub, answer_text, completion, stream_reply

MODEL = "gemini-2.5-flash"
REFRESH_TOKEN = "1//refresh-token-secret-0123456789"
CLIENT_SECRET = "client-secret-abcdef-0001"
ANSWER = {
    "candidates": [
        {"content": {"role": "model", "parts": [{"text": "fine"}]}, "finishReason": "STOP"}
    ],
    "responseId": "r-1",
    "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1, "totalTokenCount": 4},
}


def _authorized_user() -> dict[str, str]:
    """An authorized-user file as ``gcloud auth application-default login`` writes it."""
    return {
        "type": "authorized_user",
        "client_id": "764086051850-test.apps.googleusercontent.com",
        "client_secret": CLIENT_SECRET,
        "refresh_token": REFRESH_TOKEN,
        "quota_project_id": "proj-quota",
    }


@pytest.fixture
def no_adc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An environment without Application Default Credentials: no variable, an empty gcloud
    configuration folder (returned), and no metadata-server probe (that would be a request)."""
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    config = tmp_path / "gcloud"
    config.mkdir()
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(config))
    # google-auth reads NO_GCE_CHECK when it imports its metadata module (which needs
    # ``requests``, absent here: then it never probes); a module imported earlier is patched
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    metadata = sys.modules.get("google.auth.compute_engine._metadata")
    if metadata is not None:
        monkeypatch.setattr(metadata, "_NO_GCE_CHECK", True)
    return config


def _ours(record: logging.LogRecord) -> bool:
    """A WARNING of the providers (not google-auth's own)."""
    return record.name == "protocol_py.providers" and record.levelno == logging.WARNING


async def _collect(provider: GeminiProvider, request: StreamCompletionRequest) -> list[StreamEvent]:
    return [e async for e in provider.stream(request, CallContext())]


# --- no key, no credentials ------------------------------------------------------------------


async def test_gemini_without_a_key_warns_naming_both_variables_and_fails_locally(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with GeminiStub() as stub:
        provider = GeminiProvider(base_url=stub.url)
        with caplog.at_level(logging.WARNING, logger="protocol_py.providers"):
            async for client in served_client(provider):  # the server starts the provider
                done = await client.complete(completion(MODEL), timeout=20)
                assert (await client.describe(timeout=10)).name == "gemini"  # still serving
        await provider.aclose()
    warnings = [r.getMessage() for r in caplog.records if _ours(r)]
    assert warnings == [
        "gemini: no API key: set GEMINI_API_KEY or GOOGLE_API_KEY, or Configure api_key; every "
        "request fails with AUTHENTICATION until one is set"
    ]
    assert done.error is not None and done.stop is None
    assert (done.error.kind, done.error.message, done.error.retryable) == (
        ErrorKind.AUTHENTICATION,
        NO_API_KEY,
        False,
    )
    assert stub.seen == []  # never sent upstream


async def test_gemini_configure_api_key_lifts_the_local_refusal() -> None:
    async with GeminiStub() as stub:
        stub.queue(stream_reply(ANSWER))
        provider = GeminiProvider(base_url=stub.url)
        with pytest.raises(ProviderError) as info:
            await _collect(provider, completion(MODEL))
        assert info.value.error.message == NO_API_KEY
        await provider.configure({"api_key": "AIzaSy-configured-0001"})
        assert await answer_text(provider, MODEL) == "fine"
    assert stub.seen[0].headers["x-goog-api-key"] == "AIzaSy-configured-0001"


async def test_vertex_without_credentials_warns_and_fails_locally_naming_what_to_set(
    no_adc: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with GeminiStub() as stub:
        provider = VertexProvider(base_url=stub.url)
        with caplog.at_level(logging.WARNING, logger="protocol_py.providers"):
            await provider.start()
        with pytest.raises(ProviderError) as info:
            await _collect(provider, completion(MODEL))
        await provider.aclose()
        assert stub.seen == []
    warnings = [r.getMessage() for r in caplog.records if _ours(r)]
    assert warnings == [
        f"{NO_CREDENTIALS}; unless this runs on Google Cloud (metadata server), every request "
        "fails with AUTHENTICATION",
        "vertex: no project: set GOOGLE_CLOUD_PROJECT or Configure project; every request fails "
        "until one is known",
    ]
    assert (info.value.error.kind, info.value.error.message) == (
        ErrorKind.AUTHENTICATION,
        NO_CREDENTIALS,
    )
    for named in (
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_CLOUD_PROJECT",
        "GOOGLE_CLOUD_LOCATION",
    ):
        assert named in NO_CREDENTIALS


async def test_vertex_with_an_adc_file_present_does_not_warn_about_credentials(
    no_adc: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (no_adc / "application_default_credentials.json").write_text(
        json.dumps(_authorized_user()), encoding="utf-8"
    )
    provider = VertexProvider(project="p")
    with caplog.at_level(logging.WARNING, logger="protocol_py.providers"):
        await provider.start()
    await provider.aclose()
    assert [r.getMessage() for r in caplog.records if _ours(r)] == []


# --- Application Default Credentials and authorized-user files ---------------------------------


def _refresh_form(stub: GeminiStub) -> dict[str, list[str]]:
    (token,) = stub.tokens()
    assert token.method == "POST"
    return parse_qs(token.body.decode())


def _expect_refresh_token_grant(stub: GeminiStub) -> None:
    form = _refresh_form(stub)
    assert form["grant_type"] == ["refresh_token"]
    assert form["refresh_token"] == [REFRESH_TOKEN]
    assert form["client_id"] == [_authorized_user()["client_id"]]
    (seen,) = stub.streams()
    assert seen.headers["authorization"] == "Bearer ya29.stub-1"
    assert seen.path.startswith("/projects/p-adc/locations/global/publishers/google/models/")


@pytest.mark.parametrize("where", ["GOOGLE_APPLICATION_CREDENTIALS", "gcloud_login_file"])
async def test_adc_authorized_user_found_by_google_auth(
    where: str, no_adc: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No file given to the provider: google.auth.default finds it through the variable, or
    as gcloud's ``application_default_credentials.json``."""
    if where == "GOOGLE_APPLICATION_CREDENTIALS":
        key_file = tmp_path / "adc.json"
        monkeypatch.setenv(where, str(key_file))
    else:
        key_file = no_adc / "application_default_credentials.json"
    key_file.write_text(json.dumps(_authorized_user()), encoding="utf-8")
    async with GeminiStub() as stub:
        stub.queue(stream_reply(ANSWER))
        credentials = VertexCredentials(token_uri=stub.url + "/token")
        provider = VertexProvider(project="p-adc", credentials=credentials, base_url=stub.url)
        assert await answer_text(provider, MODEL) == "fine"
    _expect_refresh_token_grant(stub)


async def test_authorized_user_file_from_the_cli_environment(tmp_path: Path) -> None:
    key_file = tmp_path / "user.json"
    key_file.write_text(json.dumps(_authorized_user()), encoding="utf-8")
    async with GeminiStub() as stub:
        stub.queue(stream_reply(ANSWER))
        provider = VertexProvider.from_cli(
            base_url=stub.url,
            discover=False,
            env={
                "GOOGLE_APPLICATION_CREDENTIALS": str(key_file),
                "GOOGLE_CLOUD_PROJECT": "p-adc",
                "VERTEX_TOKEN_URI": stub.url + "/token",
            },
        )
        assert isinstance(provider, VertexProvider)
        assert await answer_text(provider, MODEL) == "fine"
    _expect_refresh_token_grant(stub)


@pytest.mark.parametrize("source", ["file", "adc"])
async def test_a_refused_refresh_is_authentication_without_any_secret(
    source: str, no_adc: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    key_file = tmp_path / "user.json"
    key_file.write_text(json.dumps(_authorized_user()), encoding="utf-8")
    if source == "adc":
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
    async with GeminiStub() as stub:
        stub.token_error = {  # an endpoint that echoes what it was sent
            "error": "invalid_grant",
            "error_description": f"Token has been expired or revoked: {REFRESH_TOKEN}",
            "sent": {"refresh_token": REFRESH_TOKEN, "client_secret": CLIENT_SECRET},
        }
        credentials = VertexCredentials(
            file=str(key_file) if source == "file" else None, token_uri=stub.url + "/token"
        )
        provider = VertexProvider(project="p-adc", credentials=credentials, base_url=stub.url)
        async for client in served_client(provider):
            done = await client.complete(completion(MODEL), timeout=30)
            assert (await client.describe(timeout=10)).name == "vertex"  # still serving
        await provider.aclose()
        assert stub.streams() == []  # nothing sent without a token
    error: Any = done.error
    assert error is not None and done.stop is None
    assert (error.kind, error.retryable) == (ErrorKind.AUTHENTICATION, False)
    assert error.message == (
        "vertex: credentials refused or unavailable (RefreshError: invalid_grant: Token has "
        "been expired or revoked: ***)"
    )
    assert REFRESH_TOKEN not in error.message and CLIENT_SECRET not in error.message


# --- the Configure schema ----------------------------------------------------------------------


async def test_vertex_configure_schema_is_closed_so_the_server_warns_about_nothing_of_ours(
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider = VertexProvider(project="p")
    with caplog.at_level(logging.WARNING, logger="protocol_py.server"):
        async for client in served_client(provider):
            with pytest.raises(GRPCError) as info:
                await client.configure(
                    {"credentials": {"type": "authorized_user", "refresh_tokn": "x"}}, timeout=10
                )
            await client.configure({"credentials": _authorized_user()}, timeout=10)
            assert (await client.describe(timeout=10)).name == "vertex"  # still serving
    await provider.aclose()
    loose = [r.getMessage() for r in caplog.records if "allows unknown keys" in r.getMessage()]
    assert loose == []
    assert "refresh_tokn" in str(info.value.message)
    assert provider.credentials.configured
