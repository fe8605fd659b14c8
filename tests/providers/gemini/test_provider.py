"""The gemini and vertex providers against the stub: URLs, headers, credentials, errors,
countTokens, discovery and the console script (docs/adapters.md "Gemini"). HTTP error
classification by status: tests/providers/http/test_error_classification_paths.py."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from protocol_py.client.client import ModelClient
from protocol_py.provider import ProviderError
from protocol_py.providers import load_provider_class
from protocol_py.providers.gemini.auth import VertexCredentials
from protocol_py.providers.gemini.models import gemini_models
from protocol_py.providers.gemini.provider import (
    NO_API_KEY,
    GeminiProvider,
    VertexProvider,
    vertex_base_url,
)
from protocol_py.providers.gemini.request import build_gemini_body
from protocol_py.providers.http.errors import RetryPolicy
from protocol_py.providers.http.request import dump_body
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import (
    CountTokensRequest,
    ErrorKind,
    GenerationParams,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    TokenCountMethod,
)

from ...support.adapters import served_client
from ...support.stub_upstream import Reply
from ._gemini import GeminiStub, answer_text, completion, kinds, stream_reply, user

KEY = "AIzaSy-test-key-0001-abcdefgh"
ANSWER = [
    {
        "candidates": [{"content": {"role": "model", "parts": [{"text": "fine"}]}, "index": 0}],
        "responseId": "r-1",
        "modelVersion": "gemini-2.5-flash",
        "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3},
    },
    {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP"}
        ],
        "responseId": "r-1",
        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1, "totalTokenCount": 4},
    },
]
CONSOLE_SCRIPT = Path(sys.executable).parent / "protocol-py"


async def _collect(provider: GeminiProvider, request: StreamCompletionRequest) -> list[StreamEvent]:
    return [e async for e in provider.stream(request, CallContext())]


def _text(events: list[StreamEvent]) -> str:
    return "".join(e.text_delta.text for e in events if e.text_delta is not None)


# --- Gemini API ---------------------------------------------------------------------------------


async def test_gemini_api_url_header_body_and_answer() -> None:
    async with GeminiStub() as stub:
        stub.queue(stream_reply(*ANSWER))
        provider = GeminiProvider(api_key=KEY, base_url=stub.url + "/v1beta")
        request = completion("gemini-2.5-flash", user("hello"))
        try:
            events = await _collect(provider, request)
        finally:
            await provider.aclose()
    assert kinds(events) == ["stream_start", "metadata", "text_delta", "usage", "stop"]
    (seen,) = stub.seen
    assert seen.method == "POST"
    assert seen.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert seen.headers["x-goog-api-key"] == KEY
    assert KEY not in seen.path  # never ?key=
    assert seen.body == dump_body(build_gemini_body(request, provider.spec_for(request.model_id)))  # type: ignore[arg-type]


async def test_base_url_query_is_kept_beside_alt_sse() -> None:
    async with GeminiStub() as stub:
        stub.queue(stream_reply(*ANSWER))
        provider = GeminiProvider(api_key=KEY, base_url=stub.url + "/proxy/v1beta?team=a")
        assert await answer_text(provider) == "fine"
    path, _, query = stub.seen[0].path.partition("?")
    assert path == "/proxy/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert parse_qs(query) == {"team": ["a"], "alt": ["sse"]}


def test_from_cli_reads_gemini_api_key_then_google_api_key() -> None:
    first = GeminiProvider.from_cli(
        base_url=None, discover=False, env={"GEMINI_API_KEY": "k1", "GOOGLE_API_KEY": "k2"}
    )
    second = GeminiProvider.from_cli(base_url=None, discover=False, env={"GOOGLE_API_KEY": "k2"})
    assert isinstance(first, GeminiProvider) and isinstance(second, GeminiProvider)
    assert (first.api_key, second.api_key) == ("k1", "k2")
    with pytest.raises(ValueError, match="GOOGLE_API_KEY: the API key holds a space"):
        GeminiProvider.from_cli(base_url=None, discover=False, env={"GOOGLE_API_KEY": "a b"})
    assert load_provider_class("gemini") is GeminiProvider
    assert load_provider_class("vertex") is VertexProvider


async def test_429_retry_delay_is_the_retry_hint() -> None:
    body = {
        "error": {
            "code": 429,
            "message": "Resource has been exhausted. Please retry in 0.2s.",
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.25s"}
            ],
        }
    }
    limited = Reply(
        status=429, headers={"content-type": "application/json"}, chunks=[json.dumps(body).encode()]
    )
    async with GeminiStub() as stub:
        stub.queue(limited, stream_reply(*ANSWER), limited)
        provider = GeminiProvider(api_key=KEY, base_url=stub.url)
        try:
            events = await _collect(provider, completion("gemini-2.5-flash"))
            gap = stub.seen[1].at - stub.seen[0].at
            provider.retry = RetryPolicy(max_attempts=1)
            failed = await _collect(provider, completion("gemini-2.5-flash"))
        finally:
            await provider.aclose()
    assert _text(events) == "fine" and gap >= 0.25
    assert kinds(failed) == ["error"]
    error = failed[0].error
    assert error is not None
    assert (error.kind, error.retryable, error.http_status, error.vendor_code) == (
        ErrorKind.RATE_LIMITED,
        True,
        429,
        "RESOURCE_EXHAUSTED",
    )
    assert error.retry_after == timedelta(seconds=0.25)


async def test_count_tokens_uses_the_vendor_endpoint() -> None:
    async with GeminiStub() as stub:
        stub.count_tokens = 1234
        provider = GeminiProvider(api_key=KEY, base_url=stub.url + "/v1beta")
        try:
            answer = await provider.count_tokens(
                CountTokensRequest(model_id="gemini-2.5-pro", messages=[user("count me")])
            )
        finally:
            await provider.aclose()
    assert (answer.input_tokens, answer.method) == (1234, TokenCountMethod.VENDOR_API)
    (seen,) = stub.seen
    assert seen.path == "/v1beta/models/gemini-2.5-pro:countTokens"
    assert seen.headers["x-goog-api-key"] == KEY
    assert seen.json() == {
        "generateContentRequest": {
            "model": "models/gemini-2.5-pro",
            "contents": [{"role": "user", "parts": [{"text": "count me"}]}],
        }
    }


async def test_discover_adds_listed_models_with_conservative_defaults() -> None:
    async with GeminiStub() as stub:
        stub.listing = {
            "models": [
                {
                    "name": "models/gemini-2.5-pro",
                    "supportedGenerationMethods": ["generateContent"],
                },
                {
                    "name": "models/gemini-4-preview",
                    "supportedGenerationMethods": ["generateContent"],
                },
                {"name": "models/embedding-9", "supportedGenerationMethods": ["embedContent"]},
            ]
        }
        provider = GeminiProvider(api_key=KEY, base_url=stub.url, discover=True)
        try:
            await provider.start()
        finally:
            await provider.aclose()
    ids = [m.id for m in provider.capabilities().models]
    assert "gemini-4-preview" in ids and "embedding-9" not in ids
    new = provider.spec_for("gemini-4-preview")
    assert new is not None and (new.context_window, new.supports_tool_use) == (32_768, False)
    assert stub.seen[0].path == "/models"


async def test_raw_error_after_stop_reaches_the_kernel_as_an_error_through_grpc() -> None:
    tail = (
        b'{\r\n  "error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}\r\n}\r\n'
    )
    async with GeminiStub() as stub:
        reply = stream_reply(*ANSWER)
        reply.chunks.append(tail)
        stub.queue(reply)
        provider = GeminiProvider(api_key=KEY, base_url=stub.url)
        async for client in served_client(provider):
            done = await client.complete(completion("gemini-2.5-flash"), timeout=20)
        await provider.aclose()
    assert done.stop is None and done.error is not None
    assert (done.error.kind, done.error.vendor_code) == (ErrorKind.OVERLOADED, "UNAVAILABLE")
    assert done.usage is not None and done.usage.output_tokens == 1  # reported usage is kept


async def test_a_matched_stop_sequence_ends_the_turn_and_closes_the_upstream_call() -> None:
    first = {**ANSWER[0], "candidates": [{"content": {"parts": [{"text": "one two ST"}]}}]}
    second = {**ANSWER[0], "candidates": [{"content": {"parts": [{"text": "OP three"}]}}]}
    async with GeminiStub() as stub:
        reply = stream_reply(first, second)
        reply.hold = True  # the vendor would go on generating
        stub.queue(reply)
        provider = GeminiProvider(api_key=KEY, base_url=stub.url)
        request = completion("gemini-2.5-flash", params=GenerationParams(stop_sequences=["STOP"]))
        try:
            events = await _collect(provider, request)
            assert await stub.wait_all_closed(2.0), "the upstream call was not closed"
        finally:
            await provider.aclose()
    assert _text(events) == "one two "
    stop = events[-1].stop
    assert stop is not None
    assert (stop.reason, stop.matched_stop_sequence) == (StopReason.STOP_SEQUENCE, "STOP")
    assert "stopSequences" not in stub.seen[0].body.decode()


# --- Vertex AI ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def service_account() -> dict[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return {
        "type": "service_account",
        "project_id": "proj-sa",
        "private_key_id": "k1",
        "private_key": pem,
        "client_email": "svc@proj-sa.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token",
    }


def test_vertex_location_must_be_a_location_name() -> None:
    with pytest.raises(ValueError, match=r"GOOGLE_CLOUD_LOCATION: 'evil\.example/x#' is not a"):
        VertexProvider.from_cli(
            base_url=None, discover=False, env={"GOOGLE_CLOUD_LOCATION": "evil.example/x#"}
        )
    with pytest.raises(ValueError, match="location: 'US' is not a Vertex AI location"):
        VertexProvider(location="US")


def test_vertex_hosts_global_and_regional() -> None:
    assert vertex_base_url("global") == "https://aiplatform.googleapis.com/v1beta1"
    assert (
        vertex_base_url("europe-west4") == "https://europe-west4-aiplatform.googleapis.com/v1beta1"
    )
    provider = VertexProvider(project="p", location="us-east5")
    assert provider.base_url == "https://us-east5-aiplatform.googleapis.com/v1beta1"
    assert provider.model_path("gemini-2.5-pro") == (
        "/projects/p/locations/us-east5/publishers/google/models/gemini-2.5-pro"
    )


async def test_vertex_service_account_token_from_the_overridden_endpoint(
    service_account: dict[str, str],
) -> None:
    async with GeminiStub() as stub:
        stub.queue(stream_reply(*ANSWER), stream_reply(*ANSWER))
        credentials = VertexCredentials(info=service_account, token_uri=stub.url + "/token")
        provider = VertexProvider(
            location="us-east5", credentials=credentials, base_url=stub.url + "/v1beta1"
        )
        try:
            first = await _collect(provider, completion("gemini-2.5-pro"))
            second = await _collect(provider, completion("gemini-2.5-pro"))
        finally:
            await provider.aclose()
    assert _text(first) == _text(second) == "fine"
    token, stream1, stream2 = stub.seen
    assert (token.path, token.method) == ("/token", "POST")
    form = parse_qs(token.body.decode())
    assert form["grant_type"] == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]
    assert stream1.path == (
        "/v1beta1/projects/proj-sa/locations/us-east5/publishers/google/models/"
        "gemini-2.5-pro:streamGenerateContent?alt=sse"
    )
    # one token, reused while valid
    assert (
        stream1.headers["authorization"] == stream2.headers["authorization"] == "Bearer ya29.stub-1"
    )
    assert "x-goog-api-key" not in stream1.headers


async def test_vertex_token_echoed_by_the_upstream_is_redacted(
    service_account: dict[str, str],
) -> None:
    async with GeminiStub() as stub:
        echo = {
            "error": {
                "code": 401,
                "message": "bad token Bearer ya29.stub-1 (ya29.stub-1)",
                "status": "UNAUTHENTICATED",
            }
        }
        stub.queue(
            Reply(
                status=401,
                headers={"content-type": "application/json"},
                chunks=[json.dumps(echo).encode()],
            )
        )
        credentials = VertexCredentials(info=service_account, token_uri=stub.url + "/token")
        provider = VertexProvider(project="p", credentials=credentials, base_url=stub.url)
        try:
            events = await _collect(provider, completion("gemini-2.5-pro"))
        finally:
            await provider.aclose()
    error = events[-1].error
    assert error is not None and error.kind == ErrorKind.AUTHENTICATION
    assert "ya29.stub-1" not in error.message


async def test_vertex_refused_credentials_are_an_authentication_error(
    service_account: dict[str, str],
) -> None:
    async with GeminiStub() as stub:
        credentials = VertexCredentials(info=service_account, token_uri=stub.url + "/nope")
        provider = VertexProvider(project="p", credentials=credentials, base_url=stub.url)
        try:
            with pytest.raises(ProviderError) as info:
                await _collect(provider, completion("gemini-2.5-pro"))
        finally:
            await provider.aclose()
    assert info.value.error.kind == ErrorKind.AUTHENTICATION
    assert info.value.error.message.startswith("vertex: credentials refused or unavailable")
    assert "PRIVATE KEY" not in info.value.error.message
    assert stub.streams() == []  # nothing was sent without a token


async def test_vertex_express_mode_api_key() -> None:
    async with GeminiStub() as stub:
        stub.queue(stream_reply(*ANSWER))
        provider = VertexProvider(api_key=KEY, base_url=stub.url + "/v1beta1")
        assert await answer_text(provider) == "fine"
    assert stub.seen[0].path == (
        "/v1beta1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    )
    assert stub.seen[0].headers["x-goog-api-key"] == KEY


async def test_vertex_without_a_project_or_usable_credentials_fails_clearly(
    service_account: dict[str, str],
) -> None:
    broken = VertexProvider(credentials=VertexCredentials(info={"type": "service_account"}))
    with pytest.raises(ProviderError) as info:
        await _collect(broken, completion("gemini-2.5-flash"))
    assert info.value.error.kind == ErrorKind.AUTHENTICATION
    no_project = {k: v for k, v in service_account.items() if k != "project_id"}
    async with GeminiStub() as stub:
        credentials = VertexCredentials(info=no_project, token_uri=stub.url + "/token")
        provider = VertexProvider(credentials=credentials, base_url=stub.url)
        try:
            with pytest.raises(ProviderError) as info:
                await _collect(provider, completion("gemini-2.5-flash"))
        finally:
            await provider.aclose()
    assert (info.value.error.kind, info.value.error.message) == (
        ErrorKind.INVALID_REQUEST,
        "vertex: no project: set Configure project or GOOGLE_CLOUD_PROJECT",
    )
    assert stub.streams() == []


async def test_vertex_configure_location_project_and_credentials(
    service_account: dict[str, str],
) -> None:
    provider = VertexProvider(project="p")
    await provider.configure(
        {
            "location": "asia-northeast1",
            "project": "q",
            "credentials": service_account,
            "token_uri": "http://127.0.0.1:9/token",
        }
    )
    assert provider.base_url == "https://asia-northeast1-aiplatform.googleapis.com/v1beta1"
    assert provider.model_path("m").startswith("/projects/q/locations/asia-northeast1/")
    assert provider.credentials.project == "proj-sa"
    await provider.aclose()


# --- the console script --------------------------------------------------------------------------


async def _serve(args: list[str], env: dict[str, str]) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        str(CONSOLE_SCRIPT),
        "serve",
        *args,
        "--handshake",
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
    assert line, "no handshake line"
    return proc, line.rstrip("\n").split("|")[2]


@pytest.mark.parametrize("provider", ["gemini", "vertex"])
async def test_cli_serves_gemini_and_vertex_with_base_url(
    provider: str, service_account: dict[str, str], tmp_path: Path
) -> None:
    async with GeminiStub() as stub:
        stub.queue(stream_reply(*ANSWER))
        if provider == "gemini":
            env = {"GEMINI_API_KEY": KEY}
        else:
            key_file = tmp_path / "sa.json"
            key_file.write_text(json.dumps(service_account), encoding="utf-8")
            env = {
                "GOOGLE_APPLICATION_CREDENTIALS": str(key_file),
                "GOOGLE_CLOUD_PROJECT": "proj-cli",
                "GOOGLE_CLOUD_LOCATION": "us-central1",
                "VERTEX_TOKEN_URI": stub.url + "/token",
            }
        proc, address = await _serve(
            ["--provider", provider, "--base-url", stub.url, "--no-discover"], env
        )
        try:
            client = ModelClient.connect(address)
            try:
                caps = await client.get_capabilities(timeout=10)
                assert "gemini-3-pro-preview" in [m.id for m in caps.models]
                events = [
                    e async for e in client.stream(completion("gemini-2.5-flash"), timeout=20)
                ]
            finally:
                client.close()
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 10)
    assert _text(events) == "fine"
    seen = stub.streams()[0]
    if provider == "gemini":
        assert seen.path == "/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        assert seen.headers["x-goog-api-key"] == KEY
    else:
        assert seen.path.startswith("/projects/proj-cli/locations/us-central1/publishers/google/")
        assert seen.headers["authorization"] == "Bearer ya29.stub-1"


async def test_discovery_without_a_key_sends_nothing_and_says_the_vendor_catalog_is_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with GeminiStub() as stub:
        stub.listing = {
            "models": [
                {
                    "name": "models/gemini-4-preview",
                    "supportedGenerationMethods": ["generateContent"],
                }
            ]
        }
        provider = GeminiProvider.from_cli(base_url=stub.url, discover=None, env={})
        assert isinstance(provider, GeminiProvider) and provider.discover  # a foreign URL
        try:
            async for client in served_client(provider):  # ModelServer.start starts it
                done = await client.complete(completion("gemini-2.5-flash"), timeout=20)
                assert done.error is not None
                assert (done.error.kind, done.error.message) == (
                    ErrorKind.AUTHENTICATION,
                    NO_API_KEY,
                )
                assert (await client.describe(timeout=10)).name
        finally:
            await provider.aclose()
    assert stub.seen == []  # neither the discovery GET nor the call went upstream
    ids = [m.id for m in provider.capabilities().models]
    assert ids == [m.id for m in gemini_models()]
    served = [r.getMessage() for r in caplog.records if "serving" in r.getMessage()]
    assert served == [
        f"provider gemini: serving {len(ids)} models from the built-in gemini catalog (model "
        f"discovery skipped: {NO_API_KEY}) at {provider.base_url}/"
    ], served


async def test_discovery_with_a_key_serves_the_upstream_models_in_place_of_the_catalog() -> None:
    async with GeminiStub() as stub:
        stub.listing = {
            "models": [
                {
                    "name": "models/gemini-4-preview",
                    "supportedGenerationMethods": ["generateContent"],
                }
            ]
        }
        provider = GeminiProvider.from_cli(
            base_url=stub.url, discover=None, env={"GEMINI_API_KEY": KEY}
        )
        try:
            await provider.start()
        finally:
            await provider.aclose()
    assert [m.id for m in provider.capabilities().models] == ["gemini-4-preview"]
    assert [s.path for s in stub.seen] == ["/models"]
