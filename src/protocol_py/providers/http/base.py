"""The HTTP streaming provider base shared by the OpenAI-compatible and Anthropic providers.

What it does for every completion (spec: "StreamCompletion"; docs/decisions.md#d10 to
docs/decisions.md#d12; cases C08, C11):

1. Looks up the ModelSpec, builds the vendor body (a request the vendor cannot take becomes
   one INVALID_REQUEST error event) and serializes it prefix-stably.
2. Sends it with httpx (async, streaming). Until the response headers arrive the start-up
   deadline applies (``timeouts.startup_deadline_s``, default 120 s): no headers in time ->
   TRANSIENT error, connection closed.
3. Non-2xx: classified (:func:`protocol_py.providers.http.errors.error_from_http`). A 429, 503 or
529
   answered before any event was emitted is retried per :class:`RetryPolicy` (vendor hint or
   backoff; a hint above ``retry.max_retry_after_s`` is returned at once). The gRPC deadline is
   never outslept: the server cancels the stream at the deadline and the sleep ends with it.
4. 2xx: the body is parsed as SSE and translated. Generation must START (a content, stop or
   error event) before the start-up deadline; after that, every content event resets the
   no-progress timer (``timeouts.idle_timeout_s``, default 300 s). Keep-alive comments, pings,
   empty deltas, metadata and usage-only chunks never count as progress. Either timer firing
   ends the stream with one TRANSIENT error and closes the connection.
5. Cancellation (the server closes this generator): the upstream response is closed in
   ``finally``, so the vendor sees the connection drop.
6. Secrets: every ModelError this provider produces (error events, :class:`ProviderError` from
   CountTokens or ``--discover``) has the configured API key and the credential header values
   removed (:func:`protocol_py.providers.http.errors.redact`), wherever the upstream echoed them. An
   unexpected exception never escapes with its text: it becomes a ProviderError naming only its
   type (TRANSIENT for network errors, PERMANENT otherwise) and its traceback is logged with
   the secrets removed.
7. A 2xx response that is not ``text/event-stream`` (a JSON body from a server that ignored
   ``stream: true``, or a gateway's error object sent with status 200) is read whole and given
   to the translator's ``on_json`` (a vendor error object -> its classified error; a whole
   completion -> its content, usage and stop); any other content type is a PERMANENT error
   naming it.
8. An SSE event whose data holds at least ``OFFLOAD_MIN_BYTES`` (64 KiB) is translated in a
   worker thread (:func:`protocol_py.server.offload.run_cpu`): decoding and translating one
   huge vendor object (a 15 MiB event of 100,000 function calls) never holds the event loop,
   so other streams and Describe keep being answered meanwhile.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import math
import re
import traceback
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import httpx

from protocol_py.codec import wire
from protocol_py.codec.structs import to_struct
from protocol_py.errors import InvalidValueError
from protocol_py.provider import JSONValue, Provider, ProviderError, ProviderStartError
from protocol_py.providers.http import events as ev
from protocol_py.providers.http import vendor_json
from protocol_py.providers.http.body import (
    ACCEPT_ENCODING,
    MAX_ERROR_BODY_BYTES,
    decoded_body,
    read_capped,
)
from protocol_py.providers.http.body_memo import BodyMemo
from protocol_py.providers.http.cancel import cancel_once, shielded
from protocol_py.providers.http.clients import ClientPool
from protocol_py.providers.http.errors import (
    RetryPolicy,
    error_from_http,
    redact,
    redact_error,
    redact_event,
    remember_secrets,
    secret_values,
    transient_error,
    transport_cause,
)
from protocol_py.providers.http.image_free import has_image, messages_hold_image
from protocol_py.providers.http.request import dump_body
from protocol_py.providers.http.sse import SSEEvent, SSELimitError, SSEParser
from protocol_py.providers.http.url import (
    install_log_redaction,
    join_url,
    parse_base_url,
    parsed_url,
    safe_location,
    url_secrets,
)
from protocol_py.rules.stream_order import event_member
from protocol_py.server.offload import OFFLOAD_MIN_BYTES, run_cpu
from protocol_py.server.provider_log import exception_summary
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import (
    Capabilities,
    CountTokensRequest,
    ErrorKind,
    ModelError,
    ModelSpec,
    StreamCompletionRequest,
    StreamEvent,
)

__all__ = ["HTTPProvider", "Timeouts", "Translator", "UpstreamCall", "common_config_schema"]

log = logging.getLogger("protocol_py.providers")
install_log_redaction()  # httpx logs each request URL at INFO: never its userinfo or query


def request_failure(
    exc: Exception, what: str, url: str | None = None, *, connect_timeout_s: float | None = None
) -> ModelError:
    """The ModelError for an httpx exception raised while sending ``what`` (docs/decisions.md#d10).

    A URL the client cannot use (:class:`httpx.UnsupportedProtocol`, :class:`httpx.InvalidURL`)
    is a deterministic misconfiguration: PERMANENT, not retryable. Any other transport failure
    is TRANSIENT and retryable. The message names ``url`` as scheme, host, port and path (never
    its userinfo or query, :func:`protocol_py.providers.http.url.safe_location`) and the cause
    in words (:func:`protocol_py.providers.http.errors.transport_cause`), e.g.
    ``upstream request to http://127.0.0.1:9/v1/chat/completions failed: connection refused``.
    """
    where = f" to {safe_location(url)}" if url else ""
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
        return ModelError(
            kind=ErrorKind.PERMANENT,
            message=f"{what}{where} failed: the upstream URL is not usable ({type(exc).__name__})",
            retryable=False,
        )
    host = httpx.URL(url).host if url else None
    cause = transport_cause(exc, host=host, connect_timeout_s=connect_timeout_s)
    return transient_error(f"{what}{where} failed: {cause}")


class Translator(Protocol):
    """What a vendor stream translator offers (see ``_openai_stream`` / ``_anthropic_stream``)."""

    finished: bool

    def on_event(self, sse: SSEEvent) -> list[StreamEvent]:
        """Translate one SSE event."""

    def on_eof(self) -> list[StreamEvent]:
        """The body ended."""

    def on_json(self, body: object) -> list[StreamEvent]:
        """A whole JSON (non-SSE) response body: an error object or a non-streamed answer."""

    def on_failure(self, error: ModelError) -> list[StreamEvent]:
        """End the stream with ``error``: the usage reported so far, then the error."""


@dataclass(slots=True)
class UpstreamCall:
    """One completion's upstream call as :class:`HTTPProvider` sends it.

    The subclass hooks (:meth:`HTTPProvider.prepare_call`, :meth:`HTTPProvider.recover_call`,
    :meth:`HTTPProvider.call_url`, :meth:`HTTPProvider.call_translator`) receive it and may
    replace ``content`` or keep their own per-call data in ``extra``.

    Attributes:
        request: The completion request.
        spec: The ModelSpec it is served under.
        content: The serialized vendor body sent (UTF-8 JSON).
        extra: Per-call data of the subclass (None by default).
    """

    request: StreamCompletionRequest
    spec: ModelSpec
    content: bytes
    extra: Any = None


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Upstream time limits, in seconds.

    Attributes:
        startup_deadline_s: Generation must start (first content event) within this time of
            sending the request; also bounds waiting for the response headers.
        idle_timeout_s: The longest gap between two content events once generation started.
        connect_timeout_s: TCP/TLS connect timeout.
    """

    startup_deadline_s: float = 120.0
    idle_timeout_s: float = 300.0
    connect_timeout_s: float = 10.0


def common_config_schema(extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The Configure JSON Schema shared by the vendor providers (additionalProperties false)."""
    positive = {"type": "number", "exclusiveMinimum": 0}
    props: dict[str, Any] = {
        "api_key": {"type": "string", "minLength": 1, "description": "The vendor API key."},
        "base_url": {"type": "string", "format": "uri", "description": "The API root URL."},
        "timeouts": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "startup_deadline_s": {**positive, "default": 120},
                "idle_timeout_s": {**positive, "default": 300},
                "connect_timeout_s": {**positive, "default": 10},
            },
        },
        "retry": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "max_attempts": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
                "max_retry_after_s": {"type": "number", "minimum": 0, "default": 60},
            },
        },
    }
    if extra:
        props.update(extra)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": False,
        "properties": props,
    }


_API_KEY_RE = re.compile(r"[!-~]+")
"""A usable API key: visible ASCII only (0x21-0x7E), the characters an HTTP header value can
carry without folding, trimming or encoding."""


def check_api_key(value: str, what: str) -> str:
    """Return ``value`` when it can be sent in an HTTP header, else raise.

    Args:
        value: The API key.
        what: How the caller supplied it (``api_key``, ``OPENAI_API_KEY``), named in the error.

    Raises:
        ValueError: ``"<what>: ..."`` when the key holds a newline, a space, another control
            character or a non-ASCII character: a PERMANENT configuration error (never the
            TRANSIENT failure of the first request). The key itself is never shown.
    """
    if _API_KEY_RE.fullmatch(value) is None:
        bad = next((c for c in value if not "!" <= c <= "~"), "")
        kind = {"\n": "a newline", "\r": "a carriage return", " ": "a space"}.get(
            bad, f"the character U+{ord(bad):04X}" if bad else "nothing"
        )
        raise ValueError(
            f"{what}: the API key holds {kind}; an HTTP header can carry only visible ASCII "
            "characters (0x21-0x7E)"
        )
    return value


class HTTPProvider(Provider, abc.ABC):
    """Base of the built-in vendor providers: configuration, HTTP, retries, timeouts.

    Subclasses set :attr:`default_base_url`, :attr:`api_key_env`, :attr:`completions_path`,
    :attr:`models_path` and implement :meth:`build_body`, :meth:`make_translator`,
    :meth:`auth_headers` and :meth:`catalog`.
    """

    default_base_url: str = ""
    api_key_env: str = ""
    completions_path: str = ""
    models_path: str = "/models"
    request_id_header: str = "x-request-id"
    anthropic_hints: bool = False

    @classmethod
    def environment_variables(cls) -> tuple[tuple[str, str], ...]:
        """The environment variables ``serve --provider NAME`` reads, as ``(name, meaning)``
        pairs in the order they are consulted (``serve --help`` lists them). By default the
        one :attr:`api_key_env`, if any."""
        return ((cls.api_key_env, "API key"),) if cls.api_key_env else ()

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        discover: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.api_key = api_key
        self.base_url = parse_base_url(base_url or self.default_base_url)
        self.timeouts = timeouts or Timeouts()
        self.retry = retry or RetryPolicy()
        self.discover = discover
        self._transport = transport
        self._clients = ClientPool(self._new_client)
        self._models: dict[str, ModelSpec] = {m.id: m for m in self.catalog()}
        self._bodies = BodyMemo()
        self._secrets_memo: tuple[Hashable, tuple[str, ...]] | None = None
        remember_secrets(self.secrets())  # never shown in any log record either

    # -- subclass hooks -----------------------------------------------------------------------

    @abc.abstractmethod
    def catalog(self) -> list[ModelSpec]:
        """The curated ModelSpecs of this vendor."""

    @abc.abstractmethod
    def build_body(self, request: StreamCompletionRequest, spec: ModelSpec) -> dict[str, Any]:
        """The vendor request body (raise InvalidValueError for what the vendor cannot take)."""

    def build_content(self, request: StreamCompletionRequest, spec: ModelSpec) -> bytes:
        """The serialized vendor request body: ``dump_body(self.build_body(request, spec))``
        (a subclass may reuse per-message translations, never changing the bytes)."""
        return dump_body(self.build_body(request, spec))

    @abc.abstractmethod
    def make_translator(
        self, headers: Mapping[str, str], request: StreamCompletionRequest | None = None
    ) -> Translator:
        """A fresh stream translator for one response to ``request`` (its history's tool-call
        ids are never reused: :mod:`protocol_py.providers.http.call_ids`)."""

    @abc.abstractmethod
    def auth_headers(self) -> dict[str, str]:
        """Authentication and version headers."""

    def extra_config_schema(self) -> dict[str, Any]:
        """Vendor-specific Configure properties (merged into the common schema)."""
        return {}

    def apply_extra_config(self, config: Mapping[str, JSONValue]) -> None:
        """Apply the vendor-specific part of a validated config."""

    async def refresh_auth(self) -> None:
        """Make :meth:`auth_headers` current before a call (default: nothing to do; a provider
        with short-lived tokens fetches one here). Runs before the secrets of the call are
        read, so a fresh token is redacted like a key.

        Raises:
            ProviderError: the credentials cannot be used (the call ends with its error).
        """

    async def prepare_call(self, call: UpstreamCall, client: httpx.AsyncClient) -> None:
        """Adjust a call before its first attempt, for example replace ``call.content`` after
        an upstream side call (default: nothing).

        Raises:
            ProviderError: the call cannot be made (it ends with this error, nothing sent).
        """

    async def recover_call(
        self, call: UpstreamCall, error: ModelError, client: httpx.AsyncClient
    ) -> bool:
        """After a non-2xx answer, True when the hook changed ``call`` so that sending it again
        at once may succeed (asked at most once per call; default False)."""
        return False

    def call_url(self, call: UpstreamCall) -> str:
        """The URL the call is POSTed to (default: ``base_url`` + :attr:`completions_path`)."""
        return join_url(self.base_url, self.completions_path)

    def call_translator(self, call: UpstreamCall, headers: Mapping[str, str]) -> Translator:
        """The stream translator for one response (default :meth:`make_translator` with the
        call's request, whose history's tool-call ids the stream never reuses)."""
        return self.make_translator(headers, call.request)

    def new_parser(self) -> SSEParser:
        """The event-stream parser for one response body (default: WHATWG rules only)."""
        return SSEParser()

    def classify_http_error(
        self, status: int, body: bytes, headers: Mapping[str, str]
    ) -> ModelError:
        """A non-2xx answer as a ModelError (default
        :func:`~protocol_py.providers.http.errors.error_from_http`, DESIGN D10)."""
        return error_from_http(
            status,
            body,
            headers,
            request_id_header=self.request_id_header,
            anthropic=self.anthropic_hints,
        )

    # -- Provider API ---------------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        """The catalog (plus discovered models) and the Configure schema."""
        return Capabilities(
            models=list(self._models.values()),
            config_schema=to_struct(self.config_schema()),
        )

    def config_schema(self) -> dict[str, Any]:
        """The Configure JSON Schema: api_key, base_url, timeouts, retry, vendor extras."""
        return common_config_schema(self.extra_config_schema())

    async def configure(self, config: Mapping[str, JSONValue]) -> None:
        """Apply a schema-valid config; absent keys keep their current values.

        Streams already running finish on the previous settings and HTTP client.

        Raises:
            ValueError: ``base_url`` is not an absolute http(s) URL with a host, or
                ``api_key`` holds a character an HTTP header cannot carry
                (:func:`check_api_key`); nothing is applied, the server answers
                INVALID_ARGUMENT.
        """
        base_url = parse_base_url(config["base_url"]) if "base_url" in config else self.base_url
        api_key = check_api_key(str(config["api_key"]), "api_key") if "api_key" in config else None
        if api_key is not None:
            self.api_key = api_key
        self.base_url = base_url
        t = config.get("timeouts")
        if isinstance(t, dict):
            self.timeouts = Timeouts(
                startup_deadline_s=float(
                    t.get("startup_deadline_s", self.timeouts.startup_deadline_s)
                ),
                idle_timeout_s=float(t.get("idle_timeout_s", self.timeouts.idle_timeout_s)),
                connect_timeout_s=float(
                    t.get("connect_timeout_s", self.timeouts.connect_timeout_s)
                ),
            )
        r = config.get("retry")
        if isinstance(r, dict):
            self.retry = RetryPolicy(
                max_attempts=int(r.get("max_attempts", self.retry.max_attempts)),
                max_retry_after_s=float(r.get("max_retry_after_s", self.retry.max_retry_after_s)),
            )
        self.apply_extra_config(config)
        self._bodies.clear()  # bodies built on the previous settings are not sent
        remember_secrets(self.secrets())
        # calls in flight keep the old client; it is closed when the last of them ends
        await self._clients.retire()

    @classmethod
    def from_cli(
        cls, *, base_url: str | None, discover: bool | None, env: Mapping[str, str]
    ) -> Provider:
        """``protocol-py serve --provider NAME [--base-url URL] [--discover | --no-discover]``;
        key from env.

        ``discover`` None (neither flag): discover the upstream's models exactly when
        ``--base-url`` is given and differs from :attr:`default_base_url` (a local
        OpenAI-compatible server, a gateway); ``--no-discover`` keeps the vendor catalog.

        Raises:
            ValueError: ``--base-url`` is not an absolute http(s) URL with a host (the CLI
                exits 2); the message shows the URL with its credentials redacted. Also when
                the API key variable holds a character an HTTP header cannot carry
                (:func:`check_api_key`, naming the variable, never the key).
        """
        if base_url is not None:
            base_url = parse_base_url(base_url, what="--base-url")
        if discover is None:
            discover = base_url is not None and base_url != parse_base_url(cls.default_base_url)
        api_key = env.get(cls.api_key_env) or None
        if api_key is not None:
            check_api_key(api_key, cls.api_key_env)
        return cls(api_key=api_key, base_url=base_url, discover=discover)

    @property
    def official_upstream(self) -> bool:
        """True when :attr:`base_url` is the vendor's own default API root."""
        return self.base_url == parse_base_url(self.default_base_url)

    async def start(self) -> None:
        """Warn (one WARNING line naming :attr:`api_key_env`) when no API key is set; when
        discovering (and :meth:`discovery_skipped` gives no reason not to): read GET
        <base>/models; then log (INFO) which catalog is served, and why discovery was skipped.

        At the vendor's own URL, discovered ids are added to the vendor catalog (priced like
        its entries); at any other URL the upstream's list replaces the vendor catalog (no
        prices: the vendor's prices are not the upstream's).

        Raises:
            ProviderStartError: discovery failed; the message names the URL (never its
                credentials) and the cause in words.
        """
        self.warn_missing_credentials()
        skipped = self.discovery_skipped() if self.discover else None
        discovering = self.discover and skipped is None
        if discovering:
            await self._discover()
        where = safe_location(self.base_url)
        if discovering and not self.official_upstream:
            what = "the upstream's own model list (discovered)"
        elif discovering:
            what = f"the {self.name} catalog plus the upstream's model list (discovered)"
        elif skipped is not None:
            what = f"the built-in {self.name} catalog (model discovery skipped: {skipped})"
        else:
            what = f"the built-in {self.name} catalog (no discovery)"
        log.info(
            "provider %s: serving %d models from %s at %s",
            self.name,
            len(self._models),
            what,
            where,
        )

    def discovery_skipped(self) -> str | None:
        """Why ``--discover`` sends no request upstream at start-up (the vendor catalog is
        served instead), or None to discover. Default: never skipped (a local upstream may need
        no key)."""
        return None

    def warn_missing_credentials(self) -> None:
        """At start-up, one WARNING line when no API key is set, naming :attr:`api_key_env`
        (a provider with other credentials, or several variables, says so itself)."""
        if not self.api_key and self.api_key_env:
            log.warning(
                "no API key: %s is not set; an upstream that requires one refuses every "
                "request (AUTHENTICATION) until it is set or Configure sends api_key",
                self.api_key_env,
            )

    async def _discover(self) -> None:
        from protocol_py.providers.catalog import discovered_model  # noqa: PLC0415

        try:
            response, body = await self.fetch("GET", self.models_path, headers=self.auth_headers())
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            models_url = join_url(self.base_url, self.models_path)
            cause = transport_cause(
                exc,
                host=httpx.URL(models_url).host,
                connect_timeout_s=self.timeouts.connect_timeout_s,
            )
            raise ProviderStartError(
                f"model discovery: cannot reach upstream GET {safe_location(models_url)}: {cause}"
            ) from None
        if response.status_code >= 300:
            err = self.redact_error(
                self.classify_http_error(response.status_code, body, response.headers)
            )
            raise ProviderStartError(
                f"model discovery: GET {safe_location(join_url(self.base_url, self.models_path))} "
                f"failed: {err.message}"
            )
        try:
            payload = vendor_json.loads(body)
        except ValueError:
            raise ProviderStartError(
                f"model discovery: GET "
                f"{safe_location(join_url(self.base_url, self.models_path))} did not return JSON"
            ) from None
        official = self.official_upstream
        if not official:
            self._models = {}
        for model_id in self.listed_model_ids(payload):
            if model_id not in self._models:
                self._models[model_id] = discovered_model(
                    model_id, priced_like=self.catalog() if official else None
                )
        if not self._models:
            raise ProviderStartError(
                f"model discovery: GET {safe_location(join_url(self.base_url, self.models_path))} "
                'listed no models (expected {"data": [{"id": ...}, ...]}); '
                "--no-discover serves the vendor catalog instead"
            )

    def listed_model_ids(self, payload: object) -> list[str]:
        """The model ids of a ``--discover`` listing (default: OpenAI's ``data[].id``)."""
        entries = payload.get("data") if isinstance(payload, dict) else None
        return [
            e["id"]
            for e in (entries if isinstance(entries, list) else [])
            if isinstance(e, dict) and isinstance(e.get("id"), str) and e["id"]
        ]

    async def fetch(
        self, method: str, path: str, *, headers: Mapping[str, str], content: bytes | None = None
    ) -> tuple[httpx.Response, bytes]:
        """One non-streamed upstream call (``--discover``, CountTokens): the response and its
        decoded body, read with :func:`protocol_py.providers.http.body.read_capped` (at most
        :data:`MAX_ERROR_BODY_BYTES` for a non-2xx answer, :data:`_MAX_WHOLE_BODY` for a 2xx
        one; a compression bomb is never expanded past that). The connection is closed.

        Raises:
            httpx.HTTPError: the request failed or the body could not be decoded.
            httpx.InvalidURL: the URL is unusable.
        """
        async with self._clients.lease() as client:
            request = client.build_request(
                method,
                join_url(self.base_url, path),
                content=content,
                headers={"accept-encoding": ACCEPT_ENCODING, **headers},
            )
            response = await cancel_once(client.send(request, stream=True), discard=_close_response)
            try:
                limit = MAX_ERROR_BODY_BYTES if response.status_code >= 300 else _MAX_WHOLE_BODY
                body = await cancel_once(read_capped(response, limit))
            finally:
                await shielded(response.aclose())
        return response, body

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._clients.aclose()

    def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        """Run one completion upstream (see the module docstring for the full behaviour).

        Raises:
            ProviderError: only for a failure that is not an error event (never with a secret
                in its text); every other failure is an in-band error event.
        """
        return self._redacted(request)

    def secrets(self) -> list[str]:
        """The literal strings never sent to a client or a log: the key, credential headers,
        and the base URL's userinfo and query values (worked out again only when the key, the
        authentication headers or the base URL changed)."""
        headers = self.auth_headers()
        key = (self.api_key, tuple(headers.items()), self.base_url)
        known = self._secrets_memo
        if known is not None and known[0] == key:
            return list(known[1])
        found = set(secret_values(self.api_key, headers))
        found.update(url_secrets(self.base_url))
        secrets = sorted(found, key=len, reverse=True)
        self._secrets_memo = (key, tuple(secrets))
        return secrets

    def redact_error(self, error: ModelError) -> ModelError:
        """``error`` with this provider's secrets removed (in place; returned for chaining)."""
        return redact_error(error, self.secrets())

    def provider_error(self, exc: BaseException) -> ProviderError:
        """A redacted ProviderError for any exception (ProviderError keeps its ModelError).

        Network errors (httpx transport errors, OSError, timeouts) are TRANSIENT, anything else
        PERMANENT; the message names only the exception type. Unexpected exceptions are logged
        with their traceback, secrets removed.
        """
        if isinstance(exc, ProviderError):
            exc.error = self.redact_error(exc.error)
            exc.args = (f"{exc.error.kind.name}: {exc.error.message}",)
            exc.__cause__ = exc.__context__ = None
            return exc
        if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
            return ProviderError(request_failure(exc, "upstream request"))
        if isinstance(exc, httpx.TransportError | OSError | TimeoutError):
            return ProviderError(
                transient_error(f"upstream connection failed ({type(exc).__name__})")
            )
        # one line at ERROR (the type and the innermost frame, never the value); the traceback,
        # secrets removed, at DEBUG only
        log.error("provider %s: internal error: %s", self.name, exception_summary(exc))
        if log.isEnabledFor(logging.DEBUG):
            text = "".join(traceback.format_exception(exc))
            log.debug("provider %s: traceback: %s", self.name, redact(text, self.secrets()))
        return ProviderError(
            ModelError(
                kind=ErrorKind.PERMANENT,
                message=f"internal provider error ({type(exc).__name__})",
                retryable=False,
            )
        )

    async def _redacted(self, request: StreamCompletionRequest) -> AsyncIterator[StreamEvent]:
        failure: ProviderError | None = None
        try:
            await self.refresh_auth()
        except Exception as exc:
            failure = self.provider_error(exc)
        if failure is not None:
            raise failure
        secrets = self.secrets()
        known = self._secrets_memo
        async with self._clients.lease() as client:  # a retired client closes after its calls
            events = self._stream(request, client)
            try:
                async for raw in events:
                    # every string valid UTF-8 (a lone surrogate would fail the encoding)
                    event = ev.scrub_event(raw)
                    if (
                        event.text_delta is None
                        and event.thinking_delta is None
                        and event.tool_call_delta is None
                    ):
                        # an event that may carry vendor text: a Configure or a token refresh
                        # during the call (a retry sent with the new key) adds its secrets
                        current = self.secrets()
                        if self._secrets_memo is not known:
                            known = self._secrets_memo
                            merged = set(secrets).union(current)
                            secrets = sorted(merged, key=len, reverse=True)
                    yield redact_event(event, secrets)
            except Exception as exc:
                failure = self.provider_error(exc)
            finally:
                await events.aclose()
        if failure is not None:
            raise failure  # raised outside the handler: no chained exception keeps the text

    # -- internals -----------------------------------------------------------------------------

    def _new_client(self) -> httpx.AsyncClient:
        timeout = httpx.Timeout(
            connect=self.timeouts.connect_timeout_s, read=None, write=30.0, pool=30.0
        )
        return httpx.AsyncClient(timeout=timeout, transport=self._transport)

    def spec_for(self, model_id: str) -> ModelSpec | None:
        """The ModelSpec served under ``model_id``, or None."""
        return self._models.get(model_id)

    def count_input_tokens(self, request: StreamCompletionRequest) -> int | None:
        """ESTIMATE for the server's context-window check: ceil(UTF-8 bytes of the vendor body
        / 4), the estimate of the OpenAI-compatible CountTokens (docs/adapters.md).

        None (no check) for an unknown model, a body the vendor API cannot take (the stream
        reports that), or a request holding an image (its base64 data would be counted, a
        large overestimate).
        """
        spec = self.spec_for(request.model_id)
        if spec is None:
            return None
        if messages_hold_image(request) or any(
            has_image(s.content) for s in request.assembled_context
        ):
            return None
        try:
            body = self.build_content(request, spec)
        except (InvalidValueError, ValueError, TypeError):
            return None
        if wire.wire_size(request):
            self._bodies.keep(request, spec, body)  # the stream of this request sends it
        return math.ceil(len(body) / 4)

    def count_tokens_body(
        self,
        request: CountTokensRequest,
        build: Callable[[StreamCompletionRequest, ModelSpec], Mapping[str, Any]] | None = None,
    ) -> bytes:
        """The serialized vendor body (UTF-8 JSON) for a CountTokens request
        (docs/decisions.md#d15).

        The request's messages, tools and assembled context become a StreamCompletionRequest
        for the same model, built with ``build`` (default :meth:`build_body`) and serialized
        like a completion body.

        Raises:
            ProviderError: NOT_FOUND for a model this provider does not serve; INVALID_REQUEST
                (naming the field) for a request the vendor API cannot take.
        """
        spec = self.spec_for(request.model_id)
        if spec is None:
            raise ProviderError(
                ModelError(
                    kind=ErrorKind.NOT_FOUND,
                    message=f"model_id: unknown model {request.model_id!r}",
                )
            )
        completion = StreamCompletionRequest(
            model_id=request.model_id,
            messages=list(request.messages),
            tools=list(request.tools),
            assembled_context=list(request.assembled_context),
        )
        try:
            return dump_body((build or self.build_body)(completion, spec))
        except InvalidValueError as exc:
            raise ProviderError(
                ModelError(kind=ErrorKind.INVALID_REQUEST, message=str(exc))
            ) from None

    def _headers(self) -> dict[str, str]:
        return {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "accept-encoding": ACCEPT_ENCODING,
            **self.auth_headers(),
        }

    async def _stream(
        self, request: StreamCompletionRequest, client: httpx.AsyncClient
    ) -> AsyncGenerator[StreamEvent, None]:
        spec = self._models.get(request.model_id)
        if spec is None:
            yield ev.error(_invalid(f"model_id: unknown model {request.model_id!r}"))
            return
        try:
            size = wire.wire_size(request)
            content = self._bodies.take(request, spec)
            if content is None:
                # wire images are for the server's count only, before any provider code ran
                wire.take_images(request, "messages")
                content = await run_cpu(size, self.build_content, request, spec)
        except (InvalidValueError, ValueError) as exc:
            yield ev.error(_invalid(str(exc)))
            return
        call = UpstreamCall(request, spec, content)
        try:
            await self.prepare_call(call, client)
        except ProviderError as exc:
            yield ev.error(exc.error)
            return
        loop = asyncio.get_running_loop()
        attempt = 0
        recovered = False
        while True:
            attempt += 1
            deadline = loop.time() + self.timeouts.startup_deadline_s
            http_request = client.build_request(
                "POST",
                parsed_url(self.call_url(call)),
                content=call.content,
                headers=self._headers(),
            )
            try:
                async with asyncio.timeout_at(deadline):
                    response = await cancel_once(
                        client.send(http_request, stream=True), discard=_close_response
                    )
            except TimeoutError:
                yield ev.error(
                    transient_error(
                        f"no response from the upstream within the start-up deadline "
                        f"({self.timeouts.startup_deadline_s:g} s)"
                    )
                )
                return
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                yield ev.error(
                    request_failure(
                        exc,
                        "upstream request",
                        str(http_request.url),
                        connect_timeout_s=self.timeouts.connect_timeout_s,
                    )
                )
                return
            try:
                if response.status_code >= 300:
                    error = await self._read_error(response, deadline)
                    if not recovered and await self.recover_call(call, error, client):
                        recovered = True
                        await shielded(response.aclose())
                        continue
                    delay = self.retry.delay(attempt, error)
                    if delay is not None:
                        await shielded(response.aclose())
                        await asyncio.sleep(delay)
                        continue
                    yield ev.error(error)
                    return
                async with contextlib.aclosing(self._translate(response, deadline, call)) as events:
                    async for event in events:
                        yield event
                return
            finally:
                await shielded(response.aclose())

    async def _read_error(self, response: httpx.Response, deadline: float) -> ModelError:
        try:
            async with asyncio.timeout_at(deadline):
                body = await cancel_once(read_capped(response, MAX_ERROR_BODY_BYTES))
        except (TimeoutError, httpx.HTTPError):
            body = b""
        return self.classify_http_error(response.status_code, body, response.headers)

    async def _translate(
        self, response: httpx.Response, startup_deadline: float, call: UpstreamCall
    ) -> AsyncGenerator[StreamEvent, None]:
        translator = self.call_translator(call, response.headers)
        parser = self.new_parser()
        loop = asyncio.get_running_loop()
        deadline = startup_deadline
        started = False
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        # until the first SSE event, keep the raw body: a JSON (non-SSE) answer is read whole
        raw: bytearray | None = bytearray()
        chunks = decoded_body(response).__aiter__()
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    chunk = await cancel_once(chunks.__anext__())
            except StopAsyncIteration:
                if raw is not None and raw.strip():
                    for event in self._whole_body(translator, bytes(raw), content_type):
                        yield event
                    return
                for sse in parser.close():  # a parser that reports other lines: the last one
                    if sse.invalid_utf8:
                        for event in self._invalid_utf8(translator):
                            yield event
                        return
                    for event in translator.on_event(sse):
                        yield event
                    if translator.finished:
                        return
                for event in translator.on_eof():
                    yield event
                return
            except TimeoutError:
                what = (
                    f"no progress for {self.timeouts.idle_timeout_s:g} s (no-progress timeout)"
                    if started
                    else "generation did not start within the start-up deadline "
                    f"({self.timeouts.startup_deadline_s:g} s)"
                )
                for event in _fail(translator, transient_error(f"upstream stalled: {what}")):
                    yield event
                return
            except httpx.HTTPError as exc:
                events = translator.on_eof()
                for event in events:
                    if event.error is not None:
                        event.error.message += f" (transport: {type(exc).__name__})"
                    yield event
                return
            if raw is not None:
                raw += chunk
                if len(raw) > _MAX_WHOLE_BODY:
                    raw = None  # too large for a whole-body answer: SSE only from here on
            try:
                completed = parser.feed(chunk)
            except SSELimitError as exc:
                for event in _fail(translator, transient_error(str(exc))):
                    yield event
                return
            for sse in completed:
                raw = None
                if sse.invalid_utf8:
                    for event in self._invalid_utf8(translator):
                        yield event
                    return
                if len(sse.data) >= OFFLOAD_MIN_BYTES:  # a huge event: off the loop (point 8)
                    translated = await run_cpu(len(sse.data), translator.on_event, sse)
                else:
                    translated = translator.on_event(sse)
                for event in translated:
                    # text deltas (nearly every event) are progress without a oneof scan
                    if event.text_delta is not None or event_member(event)[0] in ev.PROGRESS_KINDS:
                        started = True
                        deadline = loop.time() + self.timeouts.idle_timeout_s
                    yield event
                if translator.finished:
                    await _finish_body(chunks)
                    return

    def _invalid_utf8(self, translator: Translator) -> list[StreamEvent]:
        """End the stream at an upstream event holding invalid UTF-8 (docs/decisions.md#d34):
        one WARNING line, then the usage reported so far and a TRANSIENT error; the events
        streamed before stay valid."""
        log.warning("provider %s: %s; the stream ends there", self.name, INVALID_UTF8_MESSAGE)
        return _fail(translator, transient_error(INVALID_UTF8_MESSAGE))

    def _whole_body(
        self, translator: Translator, body: bytes, content_type: str
    ) -> list[StreamEvent]:
        """A 2xx body that held no SSE event: JSON goes to ``on_json``, anything else fails."""
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            if content_type in ("", "application/json", "text/event-stream"):
                return self._invalid_utf8(translator)
            text = body.decode("utf-8", errors="replace")
        try:
            obj = vendor_json.loads(text)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            return translator.on_json(obj)
        if content_type in ("", "text/event-stream"):
            return translator.on_eof()  # an event stream that ended before any event
        shown = content_type
        return _fail(
            translator,
            ModelError(
                kind=ErrorKind.PERMANENT,
                message=f"upstream answered HTTP 2xx with content-type {shown!r} and a body "
                "that is neither an event stream nor a JSON object",
                retryable=False,
            ),
        )


async def _close_response(response: httpx.Response) -> None:
    await response.aclose()


FINISH_BODY_BYTES: Final = 64 * 1024
"""Most bytes of a finished stream's body read after its last event (``data: [DONE]``, the
end of a chunked body), so that its connection goes back to httpx's pool: a response closed
before its end closes its connection, and every turn then opened a new one (a TCP and, for a
vendor, a TLS handshake, and a send buffer grown anew for a 1 MB body;
docs/decisions.md#d39)."""

FINISH_BODY_TIMEOUT_S: Final = 0.01
"""Longest wait for the end of a finished stream's body, seconds (10 ms, below the server's
``FINAL_EVENT_PROBE``): an upstream that keeps the body open longer or sends more than
:data:`FINISH_BODY_BYTES` has its connection closed, as before."""


async def _finish_body(chunks: AsyncIterator[bytes]) -> None:
    """Read what is left of a finished stream's body (at most :data:`FINISH_BODY_BYTES` within
    :data:`FINISH_BODY_TIMEOUT_S`) and drop it; never raises but cancellation."""
    left = FINISH_BODY_BYTES
    with contextlib.suppress(TimeoutError, httpx.HTTPError, StopAsyncIteration):
        async with asyncio.timeout(FINISH_BODY_TIMEOUT_S):
            while left >= 0:
                left -= len(await cancel_once(chunks.__anext__()))


INVALID_UTF8_MESSAGE = "upstream sent invalid UTF-8 in an event (RFC 8259 section 8.1)"
"""The TRANSIENT error message (and WARNING) for vendor text that is not UTF-8
(docs/decisions.md#d34); it never shows the bytes."""

_MAX_WHOLE_BODY = 16 * 1024 * 1024
"""The largest 2xx body (bytes) kept for reading as a whole JSON answer before any SSE event."""


def _fail(translator: Translator, error: ModelError) -> list[StreamEvent]:
    """End a translator's stream with ``error`` (nothing when it already ended): the
    translator emits the usage already reported before the error."""
    if translator.finished:
        return []
    return translator.on_failure(error)


def _invalid(message: str) -> ModelError:
    return ModelError(kind=ErrorKind.INVALID_REQUEST, message=message, retryable=False)
