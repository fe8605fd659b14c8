"""OpenAI-compatible Chat Completions providers: ``openai`` (OpenAI, Azure-style gateways,
vLLM, Ollama, Groq, Mistral, xAI via ``--base-url``) and ``deepseek``.

``protocol-py serve --provider openai [--base-url URL] [--discover]`` reads the key from
``OPENAI_API_KEY``; ``--provider deepseek`` from ``DEEPSEEK_API_KEY``. The request goes to
``POST <base_url>/chat/completions`` with ``stream: true``.

Per-endpoint compatibility settings (Configure key ``compat``):

=========================  =====================================================================
key                        meaning (default for ``openai`` / ``deepseek``)
=========================  =====================================================================
max_tokens_field           ``max_completion_tokens`` / ``max_tokens`` (vLLM, Ollama: max_tokens)
reasoning_fields           delta fields read as reasoning, in order (``reasoning_content``,
                           ``reasoning``: DeepSeek, Groq and vLLM names)
reasoning_replay_field     assistant field reasoning is replayed in (``reasoning_content``)
reasoning_in_completion    ``auto`` (decide from total_tokens), ``true`` or ``false``
stream_usage               send ``stream_options.include_usage`` (true); servers that reject
                           it need false (they then report no usage)
thinking_switch            how disable_thinking is sent: ``effort`` (reasoning_effort none) /
                           ``deepseek`` (thinking.type) / ``none``
effort_levels              the endpoint's reasoning_effort ladder for collapsing ([] = as declared)
request_id_header          response header with the request id (``x-request-id``)
done_ends_turn             ``[DONE]`` without a finish_reason ends the turn (false: it is a
                           TRANSIENT error, like a body that ends without one)
=========================  =====================================================================

Tool calls that arrive whole in one chunk, without ``index`` or without ``type`` need no
setting: the translator handles every shape.

CountTokens: an ESTIMATE (this API has no counting endpoint): the UTF-8 length of the
serialized request body divided by 4, rounded up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

from protocol_py.codec import wire
from protocol_py.provider import JSONValue, ProviderError
from protocol_py.providers import catalog
from protocol_py.providers.http.base import HTTPProvider, Translator
from protocol_py.providers.http.translation_cache import TranslationCache
from protocol_py.providers.openai.request import (
    OpenAICompat,
    build_openai_body,
    build_openai_content,
)
from protocol_py.providers.openai.stream import OpenAIStreamTranslator
from protocol_py.server.offload import run_cpu
from protocol_py.version import PACKAGE_VERSION
from protocol_py_gen.model.v1 import (
    CountTokensRequest,
    CountTokensResponse,
    ModelSpec,
    StreamCompletionRequest,
    ThinkingReplay,
    TokenCountMethod,
)

__all__ = ["DeepSeekProvider", "OpenAIProvider"]

_COMPAT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "max_tokens_field": {"enum": ["max_tokens", "max_completion_tokens"]},
        "reasoning_fields": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "uniqueItems": True,
        },
        "reasoning_replay_field": {"type": "string", "minLength": 1},
        "reasoning_in_completion": {"enum": ["auto", True, False]},
        "stream_usage": {"type": "boolean"},
        "thinking_switch": {"enum": ["effort", "deepseek", "none"]},
        "effort_levels": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "uniqueItems": True,
        },
        "request_id_header": {"type": "string", "minLength": 1},
        "done_ends_turn": {"type": "boolean"},
    },
}


class OpenAIProvider(HTTPProvider):
    """The ``openai`` provider: Chat Completions with per-endpoint compatibility settings."""

    name = "openai"
    version = PACKAGE_VERSION
    source = "protocol-py/builtin/openai"
    default_base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"
    completions_path = "/chat/completions"
    models_path = "/models"
    default_compat: ClassVar[OpenAICompat] = OpenAICompat()

    def __init__(self, *, compat: OpenAICompat | None = None, **kwargs: Any) -> None:
        self.compat = compat or self.default_compat
        self._translations = TranslationCache()
        super().__init__(**kwargs)
        self.request_id_header = self.compat.request_id_header

    def catalog(self) -> list[ModelSpec]:
        """OpenAI's curated models (:func:`protocol_py.providers.catalog.openai_models`)."""
        return catalog.openai_models()

    def auth_headers(self) -> dict[str, str]:
        """``Authorization: Bearer <key>`` when a key is set."""
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def build_body(self, request: StreamCompletionRequest, spec: ModelSpec) -> dict[str, Any]:
        """Chat Completions body (see :mod:`protocol_py.providers.openai.request`)."""
        return build_openai_body(request, spec, self.compat)

    def build_content(self, request: StreamCompletionRequest, spec: ModelSpec) -> bytes:
        """The serialized body, each message's JSON reused across turns from a bounded cache
        (:mod:`protocol_py.providers.http.translation_cache`); the bytes equal
        ``dump_body(self.build_body(request, spec))``. A subclass or instance that replaces
        :meth:`build_body` gets exactly its body (no cache)."""
        own = type(self).build_body is OpenAIProvider.build_body and "build_body" not in vars(self)
        if not own:
            return super().build_content(request, spec)
        images = wire.take_images(request, "messages")  # only the first build after decoding
        return build_openai_content(request, spec, self.compat, self._translations, images)

    def make_translator(
        self, headers: Mapping[str, str], request: StreamCompletionRequest | None = None
    ) -> Translator:
        """An OpenAI-compatible stream translator with this endpoint's settings."""
        return OpenAIStreamTranslator(
            headers,
            request_id_header=self.compat.request_id_header,
            reasoning_fields=self.compat.reasoning_fields,
            reasoning_in_completion=self.compat.reasoning_in_completion,
            done_ends_turn=self.compat.done_ends_turn,
            request=request,
        )

    def extra_config_schema(self) -> dict[str, Any]:
        """Adds ``compat``."""
        return {"compat": _COMPAT_SCHEMA}

    def apply_extra_config(self, config: Mapping[str, JSONValue]) -> None:
        """Apply ``compat`` (absent keys keep their current values)."""
        raw = config.get("compat")
        if not isinstance(raw, dict):
            return
        compat = self.compat
        if "max_tokens_field" in raw:
            compat = replace(compat, max_tokens_field=raw["max_tokens_field"])
        if "reasoning_fields" in raw:
            compat = replace(compat, reasoning_fields=tuple(raw["reasoning_fields"]))
        if "reasoning_replay_field" in raw:
            compat = replace(compat, reasoning_replay_field=raw["reasoning_replay_field"])
        if "reasoning_in_completion" in raw:
            value = raw["reasoning_in_completion"]
            compat = replace(compat, reasoning_in_completion=None if value == "auto" else value)
        if "stream_usage" in raw:
            compat = replace(compat, stream_usage=bool(raw["stream_usage"]))
        if "thinking_switch" in raw:
            compat = replace(compat, thinking_switch=raw["thinking_switch"])
        if "effort_levels" in raw:
            compat = replace(compat, effort_levels=tuple(raw["effort_levels"]))
        if "done_ends_turn" in raw:
            compat = replace(compat, done_ends_turn=bool(raw["done_ends_turn"]))
        if "request_id_header" in raw:
            compat = replace(compat, request_id_header=raw["request_id_header"])
        self.compat = compat
        self.request_id_header = compat.request_id_header

    async def count_tokens(self, request: CountTokensRequest) -> CountTokensResponse:
        """ESTIMATE: ceil(UTF-8 bytes of the serialized body / 4) (docs/decisions.md#d15).

        Raises:
            ProviderError: unknown model or a request the API cannot take (redacted).
        """
        failure: ProviderError | None = None
        try:
            body = await run_cpu(wire.wire_size(request), self.count_tokens_body, request)
        except Exception as exc:
            failure = self.provider_error(exc)
        if failure is not None:
            raise failure
        return CountTokensResponse(
            input_tokens=math.ceil(len(body) / 4), method=TokenCountMethod.ESTIMATE
        )


class DeepSeekProvider(OpenAIProvider):
    """The ``deepseek`` provider: Chat Completions with DeepSeek's rules.

    ``max_tokens``; ``thinking: {"type": ...}`` for disable_thinking; reasoning replayed as
    ``reasoning_content`` on tool-calling assistant turns only (THINKING_REPLAY_TOOL_TURNS);
    usage from ``prompt_cache_hit_tokens`` / ``prompt_cache_miss_tokens``; the
    ``insufficient_system_resource`` finish reason becomes an OVERLOADED error.
    """

    name = "deepseek"
    source = "protocol-py/builtin/deepseek"
    default_base_url = "https://api.deepseek.com"
    api_key_env = "DEEPSEEK_API_KEY"
    default_compat: ClassVar[OpenAICompat] = OpenAICompat(
        max_tokens_field="max_tokens",
        default_replay=ThinkingReplay.TOOL_TURNS,
        thinking_switch="deepseek",
        reasoning_in_completion=True,
    )

    def catalog(self) -> list[ModelSpec]:
        """DeepSeek's curated models (:func:`protocol_py.providers.catalog.deepseek_models`)."""
        return catalog.deepseek_models()
