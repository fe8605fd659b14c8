"""StreamCompletionRequest -> Anthropic Messages request body (``POST /v1/messages``).

Body key order (fixed; ``messages`` last for prefix stability): ``model``, ``max_tokens``,
``stream``, ``stop_sequences``, ``temperature``, ``thinking``, ``output_config``,
``tool_choice``, ``tools``, ``system``, provider_options keys, ``messages``.

Content mapping:

- assembled_context -> ``system`` as a list of text blocks (one per context text block).
- text -> ``text`` block (empty text blocks are not sent: the API rejects them); a user message
  of exactly one text block without a cache marker is sent as a plain string; image ->
  ``image`` with a base64 source; document -> ``document`` (``title`` from the filename) with a
  ``base64`` source for PDF and a ``text`` source (``media_type: text/plain``, the decoded
  characters) for text documents (``text/*``, JSON, XML, YAML; decoded with the ``charset``
  parameter, default UTF-8); any other document type is rejected (InvalidValueError naming the
  field, rule ``adapter.anthropic.document.media_type``); tool_result -> ``tool_result``
  (``is_error`` only when true); tool_use -> ``tool_use`` with ``input`` as a JSON object.
- thinking -> ``thinking`` with ``signature`` = the stored bytes decoded as UTF-8, replayed
  byte-for-byte and in order with ``redacted_thinking`` (``data`` verbatim), never merged. A
  thinking block without a signature (a turn cut short, B09) is never sent; an assistant turn
  left empty by that is omitted. ThinkingSpec.replay OMIT drops all thinking blocks, and so
  does an assistant message produced by another provider (its signatures cannot verify here).
- cache_breakpoints -> ``cache_control: {"type": "ephemeral"}`` on the last system block, the
  last tool, or the last block of the targeted message that can carry one (thinking and
  redacted_thinking blocks cannot: the marker goes on the last other block; a message of only
  thinking blocks gets none); only when the model declares ``caching.explicit_markers``
  (otherwise ignored). Prefix stability has one exception here: when a message breakpoint moves
  to a later message between turns, the block that lost it differs (its ``cache_control`` key,
  and a one-text user message switches between the list and the plain-string form), so turn
  N's body is a byte prefix of turn N+1's only up to that block.
- tool_choice: AUTO ``{"type":"auto"}``, ANY ``{"type":"any"}``, NONE ``{"type":"none"}``,
  SPECIFIC ``{"type":"tool","name":...}``.
- Thinking controls: ``thinking_budget_tokens`` -> ``thinking: {"type":"enabled",
  "budget_tokens": N}``; ``thinking_effort`` -> ``output_config: {"effort": level}`` (collapsed
  onto the declared ladder); ``disable_thinking`` true -> ``thinking: {"type":"disabled"}``.
- ``max_tokens`` is required by the API: ``max_output_tokens`` or the model's declared maximum.
"""

from __future__ import annotations

import base64
from typing import Any

from protocol_py.codec.structs import from_struct
from protocol_py.errors import InvalidValueError
from protocol_py.providers.http.request import (
    CacheTargets,
    block_case,
    collapse_effort,
    context_texts,
    document_text,
    is_pdf,
    is_text_document,
    merge_provider_options,
    tool_input,
)
from protocol_py_gen.content.v1 import ContentBlock, Message, Role
from protocol_py_gen.model.v1 import (
    ModelSpec,
    StreamCompletionRequest,
    ThinkingReplay,
    ToolChoiceMode,
)

__all__ = ["build_anthropic_body", "build_anthropic_count_body"]

_EPHEMERAL = {"type": "ephemeral"}
_UNCACHEABLE = frozenset({"thinking", "redacted_thinking"})


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _decode_opaque(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidValueError(
            f"{where}: not the UTF-8 bytes of a vendor string (rule adapter.anthropic.opaque_utf8)"
        ) from None


def _block(block: ContentBlock, where: str, replay: ThinkingReplay) -> dict[str, Any] | None:
    name, value = block_case(block)
    if name == "text":
        return {"type": "text", "text": value.text} if value.text else None
    if name == "image":
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": value.media_type, "data": _b64(value.data)},
        }
    if name == "document":
        source: dict[str, Any]
        if is_pdf(value.media_type):
            source = {"type": "base64", "media_type": "application/pdf", "data": _b64(value.data)}
        elif is_text_document(value.media_type):
            text = document_text(value.media_type, value.data, f"{where}.document")
            source = {"type": "text", "media_type": "text/plain", "data": text}
        else:
            raise InvalidValueError(
                f"{where}.document.media_type: {value.media_type!r} is not a document type the "
                "Messages API takes (PDF or text) (rule adapter.anthropic.document.media_type)"
            )
        doc: dict[str, Any] = {"type": "document", "source": source}
        if value.filename:
            doc["title"] = value.filename
        return doc
    if name == "tool_use":
        return {
            "type": "tool_use",
            "id": value.id,
            "name": value.name,
            "input": tool_input(value.input, f"{where}.tool_use.input"),
        }
    if name == "tool_result":
        inner = [
            b
            for k, item in enumerate(value.content)
            if (b := _block(item, f"{where}.tool_result.content[{k}]", replay)) is not None
        ]
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": value.tool_use_id}
        result["content"] = inner
        if value.is_error:
            result["is_error"] = True
        return result
    if name == "thinking":
        if replay == ThinkingReplay.OMIT or not value.signature:
            return None  # unsigned thinking of an incomplete turn is never replayed (B09)
        return {
            "type": "thinking",
            "thinking": value.text,
            "signature": _decode_opaque(value.signature, f"{where}.thinking.signature"),
        }
    if name == "redacted_thinking":
        if replay == ThinkingReplay.OMIT:
            return None
        return {
            "type": "redacted_thinking",
            "data": _decode_opaque(value.data, f"{where}.redacted_thinking.data"),
        }
    raise InvalidValueError(f"{where}: unknown block {name} (rule adapter.anthropic.block)")


def _messages(
    messages: list[Message], replay: ThinkingReplay, cache: CacheTargets, provider: str
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        path = f"messages[{i}]"
        if message.role not in (Role.USER, Role.ASSISTANT):
            raise InvalidValueError(f"{path}.role: unspecified (rule adapter.message.role)")
        role = "user" if message.role == Role.USER else "assistant"
        foreign = bool(message.produced_by_provider) and message.produced_by_provider != provider
        # another provider's signatures cannot be verified here: its reasoning is not replayed
        message_replay = ThinkingReplay.OMIT if foreign else replay
        blocks = [
            b
            for j, block in enumerate(message.content)
            if (b := _block(block, f"{path}.content[{j}]", message_replay)) is not None
        ]
        if not blocks:
            continue  # e.g. an interrupted turn holding only unsigned thinking (B09)
        marked = False
        if i in cache.message_indexes:
            # thinking blocks cannot carry cache_control: mark the last block that can
            for k in range(len(blocks) - 1, -1, -1):
                if blocks[k]["type"] not in _UNCACHEABLE:
                    blocks[k] = {**blocks[k], "cache_control": dict(_EPHEMERAL)}
                    marked = True
                    break
        if role == "user" and len(blocks) == 1 and blocks[0]["type"] == "text" and not marked:
            out.append({"role": role, "content": blocks[0]["text"]})
        else:
            out.append({"role": role, "content": blocks})
    return out


def _tools(request: StreamCompletionRequest, cache: CacheTargets) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    for i, tool in enumerate(request.tools):
        entry: dict[str, Any] = {"name": tool.name}
        if tool.description:
            entry["description"] = tool.description
        entry["input_schema"] = (
            from_struct(tool.input_schema, path=f"tools[{i}].input_schema")
            if tool.input_schema is not None
            else {"type": "object", "properties": {}}
        )
        tools.append(entry)
    if tools and cache.after_tools:
        tools[-1]["cache_control"] = dict(_EPHEMERAL)
    return tools


def _system(request: StreamCompletionRequest, cache: CacheTargets) -> list[dict[str, Any]]:
    system: list[dict[str, Any]] = [
        {"type": "text", "text": text} for text in context_texts(request.assembled_context)
    ]
    if system and cache.after_context:
        system[-1]["cache_control"] = dict(_EPHEMERAL)
    return system


def _replay(spec: ModelSpec) -> ThinkingReplay:
    replay = spec.thinking.replay if spec.thinking is not None else ThinkingReplay.UNSPECIFIED
    return ThinkingReplay.ALL if replay == ThinkingReplay.UNSPECIFIED else replay


def build_anthropic_body(
    request: StreamCompletionRequest, spec: ModelSpec, *, provider: str = "anthropic"
) -> dict[str, Any]:
    """Build the Messages API body for ``request`` against the model ``spec``.

    Args:
        request: The validated request.
        spec: The ModelSpec it was validated against (replay rule, caching axes, max output).
        provider: This provider's name: thinking of assistant messages whose
            ``produced_by_provider`` names another provider is not replayed.

    Returns:
        An insertion-ordered dict with ``messages`` last.

    Raises:
        InvalidValueError: an unsupported block, non-UTF-8 signature bytes, or a reserved
            provider_options key; the message names the field path and rule.
    """
    params = request.params
    cache = CacheTargets(
        request.cache_breakpoints,
        enabled=spec.caching is not None and spec.caching.explicit_markers,
    )
    max_tokens = (
        params.max_output_tokens
        if params is not None and params.max_output_tokens is not None
        else spec.max_output_tokens
    )
    body: dict[str, Any] = {"model": request.model_id, "max_tokens": max_tokens, "stream": True}
    if params is not None:
        if params.stop_sequences:
            body["stop_sequences"] = list(params.stop_sequences)
        if params.temperature is not None:
            body["temperature"] = params.temperature
        if params.disable_thinking:
            body["thinking"] = {"type": "disabled"}
        elif params.thinking_budget_tokens is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": params.thinking_budget_tokens}
        if params.thinking_effort is not None and not params.disable_thinking:
            effort = spec.thinking.effort if spec.thinking is not None else None
            levels = tuple(effort.levels) if effort is not None else ()
            body["output_config"] = {"effort": collapse_effort(params.thinking_effort, levels)}
        choice = params.tool_choice
        if choice is not None and request.tools:
            if choice.mode == ToolChoiceMode.AUTO:
                body["tool_choice"] = {"type": "auto"}
            elif choice.mode == ToolChoiceMode.ANY:
                body["tool_choice"] = {"type": "any"}
            elif choice.mode == ToolChoiceMode.NONE:
                body["tool_choice"] = {"type": "none"}
            elif choice.mode == ToolChoiceMode.SPECIFIC:
                body["tool_choice"] = {"type": "tool", "name": choice.tool_name}
    tools = _tools(request, cache)
    if tools:
        body["tools"] = tools
    system = _system(request, cache)
    if system:
        body["system"] = system
    merge_provider_options(body, request)
    body["messages"] = _messages(list(request.messages), _replay(spec), cache, provider)
    return body


def build_anthropic_count_body(
    model_id: str,
    request: StreamCompletionRequest,
    spec: ModelSpec,
) -> dict[str, Any]:
    """The ``/v1/messages/count_tokens`` body: model, tools, system and messages only."""
    full = build_anthropic_body(request, spec)
    body: dict[str, Any] = {"model": model_id}
    for key in ("tools", "system", "messages"):
        if key in full:
            body[key] = full[key]
    return body
