"""The ``anthropic`` provider: Anthropic Messages API (``POST /v1/messages``, streaming).

``protocol-py serve --provider anthropic [--base-url URL] [--discover]`` reads the key from
``ANTHROPIC_API_KEY`` and sends ``x-api-key`` and ``anthropic-version: 2023-06-01``. Request
and response mapping: :mod:`protocol_py.providers.anthropic.request` and
:mod:`protocol_py.providers.anthropic.stream`.

CountTokens: VENDOR_API, through ``POST /v1/messages/count_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from protocol_py.codec import wire
from protocol_py.provider import ProviderError
from protocol_py.providers import catalog
from protocol_py.providers.anthropic.request import (
    build_anthropic_body,
    build_anthropic_count_body,
)
from protocol_py.providers.anthropic.stream import AnthropicStreamTranslator
from protocol_py.providers.http import vendor_json
from protocol_py.providers.http.base import HTTPProvider, Translator, request_failure
from protocol_py.providers.http.errors import error_from_http, transient_error
from protocol_py.server.offload import run_cpu
from protocol_py.version import PACKAGE_VERSION
from protocol_py_gen.model.v1 import (
    CountTokensRequest,
    CountTokensResponse,
    ModelSpec,
    StreamCompletionRequest,
    TokenCountMethod,
)

__all__ = ["ANTHROPIC_VERSION", "AnthropicProvider"]

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header value sent with every request."""


class AnthropicProvider(HTTPProvider):
    """Anthropic Messages: signed thinking replay, cache_control markers, count_tokens."""

    name = "anthropic"
    version = PACKAGE_VERSION
    source = "protocol-py/builtin/anthropic"
    default_base_url = "https://api.anthropic.com"
    api_key_env = "ANTHROPIC_API_KEY"
    completions_path = "/v1/messages"
    models_path = "/v1/models"
    request_id_header = "request-id"
    anthropic_hints = True

    def catalog(self) -> list[ModelSpec]:
        """Anthropic's curated models (:func:`protocol_py.providers.catalog.anthropic_models`)."""
        return catalog.anthropic_models()

    def auth_headers(self) -> dict[str, str]:
        """``x-api-key`` (when set) and ``anthropic-version``."""
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        return headers

    def build_body(self, request: StreamCompletionRequest, spec: ModelSpec) -> dict[str, Any]:
        """Messages body (see :mod:`protocol_py.providers.anthropic.request`)."""
        return build_anthropic_body(request, spec, provider=self.name)

    def make_translator(
        self, headers: Mapping[str, str], request: StreamCompletionRequest | None = None
    ) -> Translator:
        """An Anthropic stream translator."""
        return AnthropicStreamTranslator(headers, request=request)

    async def count_tokens(self, request: CountTokensRequest) -> CountTokensResponse:
        """Count input tokens with the vendor's endpoint (VENDOR_API, docs/decisions.md#d15).

        Raises:
            ProviderError: unknown model, a request the API cannot take, or the vendor's
                classified HTTP error (the API key and credential headers removed from its
                text).
        """
        failure: ProviderError | None = None
        try:
            return await self._count_tokens(request)
        except Exception as exc:
            failure = self.provider_error(exc)
        raise failure  # outside the handler: no chained exception keeps the secret

    async def _count_tokens(self, request: CountTokensRequest) -> CountTokensResponse:
        body = await run_cpu(
            wire.wire_size(request),
            self.count_tokens_body,
            request,
            lambda completion, spec: build_anthropic_count_body(request.model_id, completion, spec),
        )
        try:
            response, answer = await self.fetch(
                "POST",
                "/v1/messages/count_tokens",
                content=body,
                headers={"content-type": "application/json", **self.auth_headers()},
            )
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise ProviderError(request_failure(exc, "count_tokens request")) from None
        if response.status_code >= 300:
            raise ProviderError(
                error_from_http(
                    response.status_code,
                    answer,
                    response.headers,
                    request_id_header=self.request_id_header,
                    anthropic=True,
                )
            )
        try:
            count = vendor_json.loads(answer)["input_tokens"]
        except (ValueError, KeyError, TypeError):
            raise ProviderError(
                transient_error("count_tokens answered without input_tokens")
            ) from None
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ProviderError(transient_error("count_tokens answered a non-integer count"))
        return CountTokensResponse(input_tokens=count, method=TokenCountMethod.VENDOR_API)
