"""The ``gemini`` (Gemini API) and ``vertex`` (Vertex AI) providers (docs/adapters.md "Gemini").

``protocol-py serve --provider gemini [--base-url URL] [--discover]`` reads the key from
``GEMINI_API_KEY``, else ``GOOGLE_API_KEY`` (or Configure ``api_key``) and sends it as the
``x-goog-api-key`` header, never in the URL; without a key every call fails at once with
AUTHENTICATION :data:`NO_API_KEY` (nothing is sent) after one start-up warning naming both
variables. Completions go to
``POST <base>/models/<model>:streamGenerateContent?alt=sse`` (base
``https://generativelanguage.googleapis.com/v1beta``).

``protocol-py serve --provider vertex [--base-url URL]`` reads the project from Configure
``project``, ``GOOGLE_CLOUD_PROJECT`` or the credentials, the location from Configure
``location`` or ``GOOGLE_CLOUD_LOCATION`` (default ``global``), and authenticates with OAuth
tokens from google-auth (:mod:`protocol_py.providers.gemini.auth`; with an API key instead,
Vertex's express mode, ``x-goog-api-key``). Completions go to ``POST <base>/projects/<p>/
locations/<l>/publishers/google/models/<model>:streamGenerateContent?alt=sse``, where the
base is ``https://aiplatform.googleapis.com/v1beta1`` for ``global`` and
``https://<location>-aiplatform.googleapis.com/v1beta1`` otherwise. ``--base-url`` replaces
that API root for both providers.

Request mapping: :mod:`~protocol_py.providers.gemini.request`; stream mapping:
:mod:`~protocol_py.providers.gemini.stream`; explicit caches:
:mod:`~protocol_py.providers.gemini.caching`; errors: :mod:`~protocol_py.providers.gemini.errors`.

CountTokens: VENDOR_API, through ``POST ...:countTokens`` in the form that counts the system
instruction and tools.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final
from urllib.parse import quote

import httpx

from protocol_py.codec import wire
from protocol_py.provider import JSONValue, Provider, ProviderError
from protocol_py.providers.gemini.auth import (
    NO_CREDENTIALS,
    VertexCredentials,
    adc_file_present,
    credentials_file_from_env,
)
from protocol_py.providers.gemini.caching import ExplicitCaches, plan_cache
from protocol_py.providers.gemini.errors import gemini_error_from_http
from protocol_py.providers.gemini.models import DEFAULT_CACHE_TTL_S, gemini_models
from protocol_py.providers.gemini.parts import CALL_ID_PREFIX
from protocol_py.providers.gemini.request import (
    GeminiOptions,
    build_gemini_body,
    build_gemini_count_body,
    message_kept,
)
from protocol_py.providers.gemini.stream import GeminiStreamTranslator
from protocol_py.providers.gemini.usage import CacheCharge
from protocol_py.providers.http import vendor_json
from protocol_py.providers.http.base import (
    HTTPProvider,
    Translator,
    UpstreamCall,
    check_api_key,
    log,
    request_failure,
)
from protocol_py.providers.http.call_ids import CallIds
from protocol_py.providers.http.errors import remember_secrets, transient_error
from protocol_py.providers.http.request import dump_body
from protocol_py.providers.http.sse import SSEParser
from protocol_py.providers.http.url import join_url, parse_base_url
from protocol_py.server.offload import run_cpu
from protocol_py.version import PACKAGE_VERSION
from protocol_py_gen.model.v1 import (
    CountTokensRequest,
    CountTokensResponse,
    ErrorKind,
    ModelError,
    ModelSpec,
    StreamCompletionRequest,
    TokenCountMethod,
)

__all__ = [
    "API_KEY_VARIABLES",
    "NO_API_KEY",
    "GeminiProvider",
    "VertexProvider",
    "check_location",
    "kernel_speaks_1_2",
    "vertex_base_url",
]

GEMINI_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
"""The Gemini API root."""

API_KEY_VARIABLES: Final = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
"""The environment variables ``serve --provider gemini`` reads the key from, first set wins."""

NO_API_KEY: Final = "no API key: set GEMINI_API_KEY or GOOGLE_API_KEY, or Configure api_key"
"""The AUTHENTICATION message of a gemini call made without a key (it is never sent
upstream: Google refuses every keyless call)."""


def kernel_speaks_1_2(request: StreamCompletionRequest) -> bool:
    """Whether the request's kernel speaks protocol 1.2 or later
    (``kernel_protocol_version``; absent: 1.0 or 1.1, docs/decisions.md#d30)."""
    version = request.kernel_protocol_version
    if not version:
        return False
    major, _, minor = version.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        return False
    return (int(major), int(minor)) >= (1, 2)


@dataclass(slots=True)
class _CallState:
    """Per-call data of a Gemini call (``UpstreamCall.extra``)."""

    body: dict[str, Any] | None = None
    cache_key: str | None = None
    cache_name: str | None = None
    charge: CacheCharge | None = None


class GeminiProvider(HTTPProvider):
    """The Gemini API: signatures replayed on their parts, implicit and explicit caching."""

    name = "gemini"
    version = PACKAGE_VERSION
    source = "protocol-py/builtin/gemini"
    default_base_url = GEMINI_BASE_URL
    api_key_env = "GEMINI_API_KEY"

    @classmethod
    def environment_variables(cls) -> tuple[tuple[str, str], ...]:
        """``GEMINI_API_KEY``, then ``GOOGLE_API_KEY``: the first set is the API key."""
        return (
            (API_KEY_VARIABLES[0], "API key"),
            (API_KEY_VARIABLES[1], f"API key when {API_KEY_VARIABLES[0]} is unset"),
        )

    models_path = "/models"
    request_id_header = (
        "x-goog-request-id"  # Google sends none today; the body's responseId is used
    )

    def __init__(self, *, include_thoughts: bool = True, **kwargs: Any) -> None:
        self.options = GeminiOptions(provider=self.name, include_thoughts=include_thoughts)
        self._caches = ExplicitCaches()
        super().__init__(**kwargs)

    # -- configuration ----------------------------------------------------------------------

    @classmethod
    def from_cli(
        cls, *, base_url: str | None, discover: bool | None, env: Mapping[str, str]
    ) -> Provider:
        """``serve --provider gemini``: the key from ``GEMINI_API_KEY``, else
        ``GOOGLE_API_KEY``.

        Raises:
            ValueError: ``--base-url`` is not an absolute http(s) URL, or the key holds a
                character an HTTP header cannot carry (naming the variable).
        """
        if base_url is not None:
            base_url = parse_base_url(base_url, what="--base-url")
        if discover is None:  # a foreign --base-url discovers its models (HTTPProvider.from_cli)
            discover = base_url is not None and base_url != parse_base_url(cls.default_base_url)
        for variable in API_KEY_VARIABLES:
            key = env.get(variable) or None
            if key is not None:
                check_api_key(key, variable)
                return cls(api_key=key, base_url=base_url, discover=discover)
        return cls(base_url=base_url, discover=discover)

    def warn_missing_credentials(self) -> None:
        """At start-up without a key: one WARNING line naming both variables."""
        if not self.api_key:
            log.warning(
                "gemini: %s; every request fails with AUTHENTICATION until one is set", NO_API_KEY
            )

    def discovery_skipped(self) -> str | None:
        """Without a key nothing is sent upstream, model discovery included (every call would
        fail AUTHENTICATION at once): :data:`NO_API_KEY`."""
        return None if self.api_key else NO_API_KEY

    async def refresh_auth(self) -> None:
        """Refuse a call without a key at once, before anything is sent.

        Raises:
            ProviderError: AUTHENTICATION :data:`NO_API_KEY`.
        """
        if not self.api_key:
            raise ProviderError(
                ModelError(kind=ErrorKind.AUTHENTICATION, message=NO_API_KEY, retryable=False)
            )

    def catalog(self) -> list[ModelSpec]:
        """The curated Gemini models (:func:`protocol_py.providers.gemini.models.gemini_models`)."""
        return gemini_models()

    def auth_headers(self) -> dict[str, str]:
        """``x-goog-api-key`` when a key is set (never the ``?key=`` query parameter)."""
        return {"x-goog-api-key": self.api_key} if self.api_key else {}

    def extra_config_schema(self) -> dict[str, Any]:
        """Adds ``include_thoughts`` (ask for thought summaries; default true)."""
        return {"include_thoughts": {"type": "boolean"}}

    def apply_extra_config(self, config: Mapping[str, JSONValue]) -> None:
        """Apply ``include_thoughts``; a new key or URL forgets the explicit caches."""
        if "include_thoughts" in config:
            self.options = replace(self.options, include_thoughts=bool(config["include_thoughts"]))
        self._caches.clear()

    def cache_scope(self) -> str:
        """What keeps explicit caches apart: the base URL and a digest of the key."""
        key = hashlib.sha256((self.api_key or "").encode()).hexdigest()
        return f"{self.base_url}|key:{key}"

    # -- paths --------------------------------------------------------------------------------

    def model_path(self, model_id: str) -> str:
        """The path of a model below the API root."""
        return f"/models/{quote(model_id, safe='-._~')}"

    def model_resource(self, model_id: str) -> str:
        """The model's resource name inside a request body (``cachedContents.model``)."""
        return f"models/{model_id}"

    def cache_path(self) -> str:
        """The path of the ``cachedContents`` collection below the API root."""
        return "/cachedContents"

    def call_url(self, call: UpstreamCall) -> str:
        """``<base><model path>:streamGenerateContent?alt=sse`` (the base's query kept)."""
        url = httpx.URL(
            join_url(
                self.base_url, f"{self.model_path(call.request.model_id)}:streamGenerateContent"
            )
        )
        return str(url.copy_merge_params({"alt": "sse"}))

    def listed_model_ids(self, payload: object) -> list[str]:
        """``models[].name`` without ``models/``, for models that can generate content."""
        entries = payload.get("models") if isinstance(payload, dict) else None
        out: list[str] = []
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                continue
            methods = entry.get("supportedGenerationMethods")
            if isinstance(methods, list) and "generateContent" not in methods:
                continue
            model_id = entry["name"].rsplit("/", 1)[-1]
            if model_id:
                out.append(model_id)
        return out

    # -- the call -------------------------------------------------------------------------------

    def build_body(self, request: StreamCompletionRequest, spec: ModelSpec) -> dict[str, Any]:
        """The ``generateContent`` body (:mod:`protocol_py.providers.gemini.request`)."""
        return build_gemini_body(request, spec, self.options)

    def make_translator(
        self, headers: Mapping[str, str], request: StreamCompletionRequest | None = None
    ) -> Translator:
        """A translator with no call context (tests): 1.2 text signatures, fresh ids; a call
        gets :meth:`call_translator`'s."""
        return GeminiStreamTranslator()

    def call_translator(self, call: UpstreamCall, headers: Mapping[str, str]) -> Translator:
        """A translator for this request: ids unique in its conversation, the kernel's
        protocol version, its stop sequences and the cache it created."""
        request = call.request
        state = call.extra if isinstance(call.extra, _CallState) else _CallState()
        params = request.params
        return GeminiStreamTranslator(
            call_ids=CallIds.from_request(request, prefix=CALL_ID_PREFIX),
            text_vendor_data=kernel_speaks_1_2(request),
            stop_sequences=list(params.stop_sequences) if params is not None else [],
            cache=state.charge,
        )

    def new_parser(self) -> SSEParser:
        """An SSE parser that also reports lines outside the grammar (raw JSON errors)."""
        return SSEParser(other_lines=True)

    def classify_http_error(
        self, status: int, body: bytes, headers: Mapping[str, str]
    ) -> ModelError:
        """Google's error object (or an array of them) as a ModelError
        (:func:`~protocol_py.providers.gemini.errors.gemini_error_from_http`)."""
        return gemini_error_from_http(status, body, headers)

    async def prepare_call(self, call: UpstreamCall, client: httpx.AsyncClient) -> None:
        """Serve the request's furthest cache breakpoint from a ``cachedContents`` entry
        (:mod:`protocol_py.providers.gemini.caching`): the body then names the entry and sends
        only the contents after it."""
        request, spec = call.request, call.spec
        call.extra = _CallState()
        if (
            not request.cache_breakpoints
            or spec.caching is None
            or not spec.caching.explicit_markers
        ):
            return
        body = json.loads(call.content)
        call.extra.body = body
        await self._use_cache(call, client)

    async def _use_cache(self, call: UpstreamCall, client: httpx.AsyncClient) -> None:
        state = call.extra
        assert isinstance(state, _CallState) and state.body is not None
        request, spec = call.request, call.spec
        kept = await run_cpu(wire.wire_size(request), message_kept, request, spec, self.options)
        default_ttl = (
            spec.caching.default_ttl_seconds
            if spec.caching is not None and spec.caching.default_ttl_seconds
            else DEFAULT_CACHE_TTL_S
        )
        plan = plan_cache(request, spec, state.body, kept, default_ttl)
        if plan is None:
            return
        key = ExplicitCaches.key(
            self.cache_scope(), request.model_id, plan.prefix, plan.ttl_seconds
        )

        async def create(payload: dict[str, Any]) -> tuple[int, bytes]:
            response, answer = await self.fetch(
                "POST",
                self.cache_path(),
                content=dump_body(payload),
                headers={"content-type": "application/json", **self.auth_headers()},
            )
            return response.status_code, answer

        used = await self._caches.use(key, self.model_resource(request.model_id), plan, create)
        if used is None:
            return
        name, charge = used
        state.cache_key, state.cache_name = key, name
        state.charge = charge if charge is not None else state.charge
        call.content = dump_body({"cachedContent": name, **plan.rest})

    async def recover_call(
        self, call: UpstreamCall, error: ModelError, client: httpx.AsyncClient
    ) -> bool:
        """An answer about a cached content that no longer exists: forget the entry and send
        the request again with a new one (or uncached)."""
        state = call.extra
        if not isinstance(state, _CallState) or state.cache_name is None or state.body is None:
            return False
        text = error.message.lower()
        if error.http_status not in (400, 403, 404) or "cache" not in text:
            return False
        self._caches.forget(state.cache_name)
        state.cache_name = None
        call.content = dump_body(state.body)
        await self._use_cache(call, client)
        return True

    # -- CountTokens ----------------------------------------------------------------------------

    async def count_tokens(self, request: CountTokensRequest) -> CountTokensResponse:
        """Count with the vendor's ``countTokens`` (VENDOR_API, docs/decisions.md#d15), system
        instruction and tools included.

        Raises:
            ProviderError: unknown model, a request the API cannot take, or the vendor's
                classified HTTP error (secrets removed).
        """
        failure: ProviderError | None = None
        try:
            await self.refresh_auth()
            return await self._count_tokens(request)
        except Exception as exc:
            failure = self.provider_error(exc)
        raise failure

    def _count_body(self, request: CountTokensRequest) -> bytes:
        vertex = isinstance(self, VertexProvider)
        return self.count_tokens_body(
            request,
            lambda completion, spec: build_gemini_count_body(
                completion, spec, self.options, vertex=vertex
            ),
        )

    async def _count_tokens(self, request: CountTokensRequest) -> CountTokensResponse:
        body = await run_cpu(wire.wire_size(request), self._count_body, request)
        try:
            response, answer = await self.fetch(
                "POST",
                f"{self.model_path(request.model_id)}:countTokens",
                content=body,
                headers={"content-type": "application/json", **self.auth_headers()},
            )
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise ProviderError(request_failure(exc, "countTokens request")) from None
        if response.status_code >= 300:
            raise ProviderError(
                self.classify_http_error(response.status_code, answer, response.headers)
            )
        try:
            count = vendor_json.loads(answer)["totalTokens"]
        except (ValueError, KeyError, TypeError):
            raise ProviderError(
                transient_error("countTokens answered without totalTokens")
            ) from None
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ProviderError(transient_error("countTokens answered a non-integer count"))
        return CountTokensResponse(input_tokens=count, method=TokenCountMethod.VENDOR_API)


_CREDENTIAL_KEYS: Final = (
    # service-account key files
    "project_id",
    "private_key_id",
    "private_key",
    "client_email",
    "client_id",
    "auth_uri",
    "token_uri",
    "auth_provider_x509_cert_url",
    "client_x509_cert_url",
    "universe_domain",
    # authorized-user files (gcloud auth application-default login)
    "client_secret",
    "refresh_token",
    "quota_project_id",
    "account",
)
"""The members of the two credential files Configure ``credentials`` takes (every one a
string), so the schema is closed (``additionalProperties: false``) like the rest of it: a
misspelt member is refused, and the server has no open object of the adapter's own to warn
about."""

_VERTEX_SCHEMA: dict[str, Any] = {
    "project": {"type": "string", "minLength": 1, "description": "The Google Cloud project."},
    "location": {
        "type": "string",
        "pattern": "^[a-z0-9-]{1,64}$",
        "description": "The Vertex AI location, for example global or us-central1.",
    },
    "credentials": {
        "type": "object",
        "description": "A service-account key or authorized-user object (its JSON). Other "
        "kinds of Google credentials go in a file (credentials_file).",
        "properties": {
            "type": {"enum": ["service_account", "authorized_user"]},
            **{key: {"type": "string"} for key in _CREDENTIAL_KEYS},
        },
        "required": ["type"],
        "additionalProperties": False,
    },
    "credentials_file": {"type": "string", "minLength": 1},
    "token_uri": {"type": "string", "format": "uri", "description": "OAuth token endpoint."},
}


_LOCATION = re.compile(r"[a-z0-9-]{1,64}")


def check_location(location: str, what: str = "location") -> str:
    """``location`` when it is a Vertex location name (lowercase letters, digits and ``-``, at
    most 64 characters: it becomes part of a host name).

    Raises:
        ValueError: naming ``what`` and the rule, quoting at most 64 characters.
    """
    if not _LOCATION.fullmatch(location):
        raise ValueError(
            f"{what}: {location[:64]!r} is not a Vertex AI location (lowercase letters, digits "
            "and '-', at most 64 characters; for example global or us-central1)"
        )
    return location


def vertex_base_url(location: str) -> str:
    """The Vertex AI API root for a location (``global`` has no regional host)."""
    if location == "global":
        return "https://aiplatform.googleapis.com/v1beta1"
    return f"https://{location}-aiplatform.googleapis.com/v1beta1"


class VertexProvider(GeminiProvider):
    """Vertex AI: the Gemini models with OAuth credentials, a project and a location."""

    name = "vertex"
    source = "protocol-py/builtin/vertex"
    api_key_env = ""
    models_path = "/publishers/google/models"

    @classmethod
    def environment_variables(cls) -> tuple[tuple[str, str], ...]:
        """The project, location, credentials file and token endpoint (:meth:`from_cli`)."""
        return (
            ("GOOGLE_CLOUD_PROJECT", "project id (else the credentials' project)"),
            ("GOOGLE_CLOUD_LOCATION", "location (default global)"),
            (
                "GOOGLE_APPLICATION_CREDENTIALS",
                "credentials file (else Application Default Credentials)",
            ),
            ("VERTEX_TOKEN_URI", "OAuth token endpoint override"),
        )

    def __init__(
        self,
        *,
        project: str | None = None,
        location: str = "global",
        credentials: VertexCredentials | None = None,
        base_url: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.project = project
        self.location = check_location(location)
        self.credentials = credentials or VertexCredentials()
        self._custom_base = base_url is not None
        self.default_base_url = vertex_base_url(location)
        super().__init__(base_url=base_url, **kwargs)

    @classmethod
    def from_cli(
        cls, *, base_url: str | None, discover: bool | None, env: Mapping[str, str]
    ) -> Provider:
        """``serve --provider vertex``: ``GOOGLE_CLOUD_PROJECT``, ``GOOGLE_CLOUD_LOCATION``
        (default global), ``GOOGLE_APPLICATION_CREDENTIALS`` or Application Default
        Credentials, ``VERTEX_TOKEN_URI``.

        Raises:
            ValueError: ``--base-url`` or ``VERTEX_TOKEN_URI`` is not an absolute http(s) URL,
                or ``GOOGLE_CLOUD_LOCATION`` is not a location name (:func:`check_location`).
        """
        if base_url is not None:
            base_url = parse_base_url(base_url, what="--base-url")
        token_uri = env.get("VERTEX_TOKEN_URI") or None
        if token_uri is not None:
            token_uri = parse_base_url(token_uri, what="VERTEX_TOKEN_URI")
        location = check_location(
            env.get("GOOGLE_CLOUD_LOCATION") or "global", "GOOGLE_CLOUD_LOCATION"
        )
        return cls(
            project=env.get("GOOGLE_CLOUD_PROJECT") or None,
            location=location,
            credentials=VertexCredentials(file=credentials_file_from_env(env), token_uri=token_uri),
            base_url=base_url,
            discover=bool(discover),
        )

    def warn_missing_credentials(self) -> None:
        """At start-up: one WARNING line when no credentials can be found without a request
        (no API key, no Configure credentials, no credentials file, no Application Default
        Credentials file; only the metadata server of a Google Cloud host is left), and one
        when no project is known."""
        if self.api_key:
            return
        if not self.credentials.configured and not adc_file_present():
            log.warning(
                "%s; unless this runs on Google Cloud (metadata server), every request fails "
                "with AUTHENTICATION",
                NO_CREDENTIALS,
            )
        if not (self.project or self.credentials.project):
            log.warning(
                "vertex: no project: set GOOGLE_CLOUD_PROJECT or Configure project; every "
                "request fails until one is known"
            )

    def discovery_skipped(self) -> str | None:
        """Never: Vertex AI authenticates with a token as well as a key (:meth:`start` fetches
        one first, failing start-up without credentials)."""
        return None

    async def start(self) -> None:
        """Warn about missing credentials or project; with ``--discover`` fetch a token
        first."""
        if self.discover:
            await self.refresh_auth()
        await super().start()

    def extra_config_schema(self) -> dict[str, Any]:
        """Adds ``include_thoughts``, ``project``, ``location``, ``credentials``,
        ``credentials_file`` and ``token_uri``."""
        return {**super().extra_config_schema(), **_VERTEX_SCHEMA}

    def apply_extra_config(self, config: Mapping[str, JSONValue]) -> None:
        """Apply the Vertex settings (absent keys keep their values)."""
        super().apply_extra_config(config)
        if "project" in config:
            self.project = str(config["project"])
        if "location" in config:
            self.location = check_location(str(config["location"]))
            self.default_base_url = vertex_base_url(self.location)
            if not self._custom_base and "base_url" not in config:
                self.base_url = self.default_base_url
        if "base_url" in config:
            self._custom_base = True
        if any(k in config for k in ("credentials", "credentials_file", "token_uri")):
            info = config.get("credentials")
            file = config.get("credentials_file")
            uri = config.get("token_uri")
            self.credentials = VertexCredentials(
                info=info if isinstance(info, dict) else None,
                file=str(file) if isinstance(file, str) else None,
                token_uri=str(uri) if isinstance(uri, str) else None,
            )

    def auth_headers(self) -> dict[str, str]:
        """``Authorization: Bearer <token>`` (express mode: ``x-goog-api-key``)."""
        if self.api_key:
            return {"x-goog-api-key": self.api_key}
        token = self.credentials.token
        return {"authorization": f"Bearer {token}"} if token else {}

    async def refresh_auth(self) -> None:
        """A current OAuth token (not with an API key: express mode).

        Raises:
            ProviderError: AUTHENTICATION when no credentials can be loaded or they are
                refused; INVALID_REQUEST when no project is known.
        """
        if self.api_key:
            return
        await self.credentials.refresh()
        remember_secrets(self.secrets())
        if not (self.project or self.credentials.project):
            raise ProviderError(
                ModelError(
                    kind=ErrorKind.INVALID_REQUEST,
                    message="vertex: no project: set Configure project or GOOGLE_CLOUD_PROJECT",
                    retryable=False,
                )
            )

    def cache_scope(self) -> str:
        """The base URL, project, location and the credentials' identity (or key digest)."""
        who = (
            "key:" + hashlib.sha256(self.api_key.encode()).hexdigest()
            if self.api_key
            else self.credentials.describe()
        )
        return f"{self.base_url}|{self._project_id()}|{self.location}|{who}"

    def _project_id(self) -> str:
        return self.project or self.credentials.project or ""

    def _location_path(self) -> str:
        if self.api_key and not self._project_id():
            return ""  # express mode: no project in the path
        return f"/projects/{quote(self._project_id(), safe='-._~')}/locations/{self.location}"

    def model_path(self, model_id: str) -> str:
        """``/projects/<p>/locations/<l>/publishers/google/models/<model>``."""
        return f"{self._location_path()}/publishers/google/models/{quote(model_id, safe='-._~')}"

    def model_resource(self, model_id: str) -> str:
        """``projects/<p>/locations/<l>/publishers/google/models/<model>``."""
        return self.model_path(model_id).lstrip("/")

    def cache_path(self) -> str:
        """``/projects/<p>/locations/<l>/cachedContents``."""
        return f"{self._location_path()}/cachedContents"

    def listed_model_ids(self, payload: object) -> list[str]:
        """``publisherModels[].name``, last path segment."""
        entries = payload.get("publisherModels") if isinstance(payload, dict) else None
        return [
            e["name"].rsplit("/", 1)[-1]
            for e in (entries if isinstance(entries, list) else [])
            if isinstance(e, dict) and isinstance(e.get("name"), str) and e["name"]
        ]
