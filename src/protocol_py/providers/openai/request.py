"""StreamCompletionRequest -> OpenAI-compatible Chat Completions request body.

Body key order (fixed; ``messages`` last for prefix stability): ``model``, ``stream``,
``stream_options``, ``thinking`` (DeepSeek), ``reasoning_effort``, the max-tokens field,
``temperature``, ``stop``, ``tool_choice``, ``tools``, provider_options keys, ``messages``.

Content mapping:

- assembled_context text -> one ``system`` message (sections joined with a blank line).
- user text -> ``content`` (a plain string when the message is one text block, else parts);
  image -> ``image_url`` part with a ``data:`` URL; a PDF document -> ``file`` part with
  ``file_data`` (Chat Completions file parts take PDF only); a text document (``text/*``, JSON,
  XML, YAML) -> a ``text`` part holding its decoded characters (``charset`` parameter, default
  UTF-8); any other document type is rejected (InvalidValueError naming the field, rule
  ``adapter.openai.document.media_type``); tool_result -> a ``tool`` message
  (``tool_call_id``, text content) placed before the rest of that user message.
  ``is_error`` has no Chat Completions slot.
- assistant text -> ``content``; tool_use -> ``tool_calls`` (arguments as compact JSON; a
  ``vendor_data`` entry at ``openai.tool_call.extra_content`` is sent back as that call's
  ``extra_content`` object, the JSON value it arrived as: Gemini 3 answers 400 without its
  thought_signature; a value that is not a JSON object is rejected, rule
  ``adapter.openai.tool_use.extra_content``; entries of other locations belong to other vendors
  and are not sent);
  thinking -> ``reasoning_content`` (field name configurable) following ThinkingSpec.replay:
  TOOL_TURNS (DeepSeek default) on assistant turns with tool calls only (``""`` when that turn
  has no thinking block), ALL on every assistant turn, OMIT (OpenAI default) never.
  Redacted thinking and signatures have no slot and are not sent. An assistant message left
  with neither text nor tool calls (an interrupted turn holding only thinking, B09) is not
  sent at all, as on Anthropic.
- tool_choice: AUTO ``"auto"``, ANY ``"required"``, NONE ``"none"``, SPECIFIC
  ``{"type":"function","function":{"name":...}}``.
- Thinking controls: ``thinking_effort`` -> ``reasoning_effort`` (collapsed onto the endpoint's
  ladder when one is configured); DeepSeek: ``disable_thinking`` -> ``thinking: {"type":
  "disabled"}`` (false -> ``"enabled"``); OpenAI: ``disable_thinking`` -> ``reasoning_effort``
  ``"none"`` (or the lowest configured level). No budget control exists on this API.

History repairs and refusals (docs/adapters.md "Requests a vendor would refuse"): a tool call
left unanswered gets a "not executed" ``role: tool`` message before the next user text
(:func:`protocol_py.providers.http.history.answer_dangling_calls`); tool-call ids are the
vendor's own where it was kept (``openai.tool_call.id``), else the kernel's, an id over 40
characters as a stable derived ``call_`` id (:func:`wire_ids`); stop sequences the model does
not take are refused. A ``vendor_block`` of vendor ``openai`` and type ``reasoning.*`` goes back
in the assistant message's ``reasoning_details`` (the reasoning text field is then not sent);
any other vendor block is dropped with a warning.

The translation cache keys each message by its own content; a message the repair changed or
inserted is translated uncached. A message's wire ids depend only on the calls of the
conversation (a kept vendor id is part of its call), so a cached fragment stays exact.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from protocol_py.codec.structs import from_struct
from protocol_py.errors import InvalidValueError
from protocol_py.providers.http.call_ids import OPENAI_TOOL_CALL_ID
from protocol_py.providers.http.history import HistoryMemo, WireIds, repaired_history
from protocol_py.providers.http.request import (
    block_case,
    check_stop_sequences,
    collapse_effort,
    context_texts,
    document_text,
    dump_body,
    is_pdf,
    is_text_document,
    merge_provider_options,
    stored_json,
    tool_input,
)
from protocol_py.providers.http.translation_cache import TranslationCache
from protocol_py.providers.openai.stream import OPENAI_VENDOR
from protocol_py.rules.vendor_data import OPENAI_EXTRA_CONTENT
from protocol_py_gen.content.v1 import Message, Role
from protocol_py_gen.model.v1 import (
    ModelSpec,
    StreamCompletionRequest,
    ThinkingReplay,
    ToolChoiceMode,
)

__all__ = ["OpenAICompat", "build_openai_body", "build_openai_content", "wire_ids"]

_log = logging.getLogger("protocol_py.providers")


@dataclass(frozen=True, slots=True)
class OpenAICompat:
    """Per-endpoint compatibility settings of an OpenAI-compatible server.

    Attributes:
        max_tokens_field: ``max_completion_tokens`` (OpenAI) or ``max_tokens`` (DeepSeek, vLLM,
            Ollama, most others).
        reasoning_fields: Delta fields read as reasoning text, in priority order.
        reasoning_replay_field: The assistant-message field reasoning is replayed in.
        reasoning_in_completion: Whether reasoning tokens are inside ``completion_tokens``:
            True, False, or None to decide from ``total_tokens`` per response.
        stream_usage: Send ``stream_options: {"include_usage": true}`` (servers that reject
            ``stream_options`` need False; they then report no usage).
        default_replay: The replay rule when the ModelSpec leaves it UNSPECIFIED.
        thinking_switch: How ``disable_thinking`` is sent: ``deepseek`` (``thinking.type``),
            ``effort`` (``reasoning_effort: none``) or ``none`` (not sent).
        effort_levels: The endpoint's reasoning_effort ladder for collapsing, lowest first
            (empty: send the declared level verbatim).
        request_id_header: The response header carrying the vendor request id.
        done_ends_turn: ``data: [DONE]`` without a ``finish_reason`` ends the turn successfully
            (for servers known to omit it) instead of a TRANSIENT error.
    """

    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_completion_tokens"
    reasoning_fields: tuple[str, ...] = ("reasoning_content", "reasoning")
    reasoning_replay_field: str = "reasoning_content"
    reasoning_in_completion: bool | None = None
    stream_usage: bool = True
    default_replay: ThinkingReplay = ThinkingReplay.OMIT
    thinking_switch: Literal["deepseek", "effort", "none"] = "effort"
    effort_levels: tuple[str, ...] = ()
    request_id_header: str = "x-request-id"
    done_ends_turn: bool = False


def _data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def _user_messages(message: Message, path: str, ids: WireIds) -> list[dict[str, Any]]:
    tool_msgs: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(message.content):
        where = f"{path}.content[{j}]"
        name, value = block_case(block)
        if name == "text":
            parts.append({"type": "text", "text": value.text})
        elif name == "image":
            parts.append(
                {"type": "image_url", "image_url": {"url": _data_url(value.media_type, value.data)}}
            )
        elif name == "document":
            if is_pdf(value.media_type):
                file: dict[str, Any] = {}
                if value.filename:
                    file["filename"] = value.filename
                file["file_data"] = _data_url("application/pdf", value.data)
                parts.append({"type": "file", "file": file})
            elif is_text_document(value.media_type):
                text = document_text(value.media_type, value.data, f"{where}.document")
                parts.append({"type": "text", "text": text})
            else:
                raise InvalidValueError(
                    f"{where}.document.media_type: {value.media_type!r} is not a document type "
                    "Chat Completions takes (PDF as a file part, text as a text part) "
                    "(rule adapter.openai.document.media_type)"
                )
        elif name == "tool_result":
            texts: list[str] = []
            for k, inner in enumerate(value.content):
                iname, ivalue = block_case(inner)
                if iname != "text":
                    raise InvalidValueError(
                        f"{where}.content[{k}]: {iname} in a tool result has no Chat Completions "
                        "slot (rule adapter.openai.tool_result.text_only)"
                    )
                texts.append(ivalue.text)
            tool_msgs.append(
                {"role": "tool", "tool_call_id": ids(value.tool_use_id), "content": "".join(texts)}
            )
        else:
            raise InvalidValueError(
                f"{where}: {name} blocks are not valid in a user message "
                "(rule adapter.openai.user.block)"
            )
    out = tool_msgs
    if len(parts) == 1 and parts[0]["type"] == "text":
        out.append({"role": "user", "content": parts[0]["text"]})
    elif parts:
        out.append({"role": "user", "content": parts})
    return out


def _assistant_message(
    message: Message, path: str, replay: ThinkingReplay, compat: OpenAICompat, ids: WireIds
) -> dict[str, Any]:
    texts: list[str] = []
    reasoning: list[str] = []
    details: list[Any] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(message.content):
        where = f"{path}.content[{j}]"
        name, value = block_case(block)
        if name == "text":
            texts.append(value.text)
        elif name == "thinking":
            reasoning.append(value.text)
        elif name == "redacted_thinking":
            continue  # no slot on this API
        elif name == "tool_use":
            arguments = json.dumps(
                tool_input(value.input, f"{where}.tool_use.input"),
                ensure_ascii=False,
                separators=(",", ":"),
            )
            call: dict[str, Any] = {
                "id": ids(value.id),
                "type": "function",
                "function": {"name": value.name, "arguments": arguments},
            }
            for k, entry in enumerate(value.vendor_data):
                if entry.location == OPENAI_EXTRA_CONTENT:
                    call["extra_content"] = stored_json(
                        entry.value,
                        f"{where}.tool_use.vendor_data[{k}].value",
                        "adapter.openai.tool_use.extra_content",
                        dict,
                    )
            calls.append(call)
        elif name == "vendor_block":
            if value.vendor != OPENAI_VENDOR or not value.block_type.startswith("reasoning."):
                _log.warning(
                    "%s: a %s block of vendor %s is not sent to a Chat Completions endpoint",
                    where,
                    value.block_type[:64],
                    value.vendor[:64],
                )
                continue
            details.append(
                stored_json(
                    value.data, f"{where}.vendor_block.data", "adapter.openai.vendor_block", dict
                )
            )
        else:
            raise InvalidValueError(
                f"{where}: {name} blocks are not valid in an assistant message "
                "(rule adapter.openai.assistant.block)"
            )
    out: dict[str, Any] = {"role": "assistant"}
    text = "".join(texts)
    out["content"] = text if text or not calls else None
    if details:
        out["reasoning_details"] = details  # the vendor's own entries carry the reasoning
    elif replay == ThinkingReplay.ALL or (replay == ThinkingReplay.TOOL_TURNS and calls):
        out[compat.reasoning_replay_field] = "".join(reasoning)
    if calls:
        out["tool_calls"] = calls
    return out


HISTORY = HistoryMemo()
"""The repairs' memo of each conversation's last message list (shared by every provider)."""

MAX_TOOL_CALL_ID_CHARS = 40
"""The longest tool-call id Chat Completions accepts (OpenAI answers 400 above it)."""


def _valid_id(value: str) -> bool:
    return 0 < len(value) <= MAX_TOOL_CALL_ID_CHARS


def wire_ids(messages: Sequence[Message]) -> WireIds:
    """The tool-call ids sent for ``messages`` (:class:`protocol_py.providers.http.history.
    WireIds`): the vendor's own id where it was kept (``openai.tool_call.id``), else the
    kernel's, an id over 40 characters as a derived ``call_`` id."""
    return WireIds(messages, location=OPENAI_TOOL_CALL_ID, prefix="call_", valid=_valid_id)


def _body_head(
    request: StreamCompletionRequest, spec: ModelSpec, compat: OpenAICompat
) -> tuple[dict[str, Any], ThinkingReplay]:
    """Everything of the body before ``messages``, and the replay rule in force."""
    params = request.params
    check_stop_sequences(request, spec)
    body: dict[str, Any] = {"model": request.model_id, "stream": True}
    if compat.stream_usage:
        body["stream_options"] = {"include_usage": True}
    thinking = spec.thinking
    if params is not None:
        disable = params.disable_thinking
        if compat.thinking_switch == "deepseek" and disable is not None:
            body["thinking"] = {"type": "disabled" if disable else "enabled"}
        if params.thinking_effort is not None and not disable:
            levels = compat.effort_levels or (
                tuple(thinking.effort.levels) if thinking and thinking.effort else ()
            )
            body["reasoning_effort"] = collapse_effort(params.thinking_effort, levels)
        elif disable and compat.thinking_switch == "effort":
            body["reasoning_effort"] = compat.effort_levels[0] if compat.effort_levels else "none"
        if params.max_output_tokens is not None:
            body[compat.max_tokens_field] = params.max_output_tokens
        if params.temperature is not None:
            body["temperature"] = params.temperature
        if params.stop_sequences:
            body["stop"] = list(params.stop_sequences)
        choice = params.tool_choice
        if choice is not None and request.tools:
            if choice.mode == ToolChoiceMode.AUTO:
                body["tool_choice"] = "auto"
            elif choice.mode == ToolChoiceMode.ANY:
                body["tool_choice"] = "required"
            elif choice.mode == ToolChoiceMode.NONE:
                body["tool_choice"] = "none"
            elif choice.mode == ToolChoiceMode.SPECIFIC:
                body["tool_choice"] = {"type": "function", "function": {"name": choice.tool_name}}
    if request.tools:
        tools = []
        for i, tool in enumerate(request.tools):
            fn: dict[str, Any] = {"name": tool.name}
            if tool.description:
                fn["description"] = tool.description
            fn["parameters"] = (
                from_struct(tool.input_schema, path=f"tools[{i}].input_schema")
                if tool.input_schema is not None
                else {"type": "object", "properties": {}}
            )
            tools.append({"type": "function", "function": fn})
        body["tools"] = tools
    merge_provider_options(body, request)

    replay = thinking.replay if thinking is not None else ThinkingReplay.UNSPECIFIED
    if replay == ThinkingReplay.UNSPECIFIED:
        replay = compat.default_replay
    return body, replay


def _translate_message(
    message: Message, path: str, replay: ThinkingReplay, compat: OpenAICompat, ids: WireIds
) -> list[dict[str, Any]]:
    """The Chat Completions messages one protocol message becomes (none, one or several)."""
    if message.role == Role.ASSISTANT:
        assistant = _assistant_message(message, path, replay, compat, ids)
        if assistant["content"] or "tool_calls" in assistant:
            return [assistant]
        # else: no text and no tool calls (e.g. an interrupted turn holding only thinking,
        # B09): not a turn the API can take, so it is not sent (as on Anthropic)
        return []
    if message.role == Role.USER:
        return _user_messages(message, path, ids)
    raise InvalidValueError(f"{path}.role: unspecified (rule adapter.message.role)")


def _system_messages(request: StreamCompletionRequest) -> list[dict[str, Any]]:
    system = context_texts(request.assembled_context)
    return [{"role": "system", "content": "\n\n".join(system)}] if system else []


def build_openai_body(
    request: StreamCompletionRequest, spec: ModelSpec, compat: OpenAICompat
) -> dict[str, Any]:
    """Build the Chat Completions body for ``request`` against the model ``spec``.

    Args:
        request: The validated request.
        spec: The ModelSpec the request was validated against (replay rule, effort ladder).
        compat: The endpoint's compatibility settings.

    Returns:
        The body as an insertion-ordered dict with ``messages`` last (serialize it with
        :func:`protocol_py.providers.http.request.dump_body`).

    Raises:
        InvalidValueError: a content block the API cannot carry, or a reserved
            provider_options key; the message names the field path and rule.
    """
    body, replay = _body_head(request, spec, compat)
    messages = _system_messages(request)
    ids = wire_ids(request.messages)
    for item in repaired_history(request.messages):
        path = f"messages[{item.source}]" if item.source is not None else "messages"
        messages.extend(_translate_message(item.message, path, replay, compat, ids))
    body["messages"] = messages
    return body


def build_openai_content(
    request: StreamCompletionRequest,
    spec: ModelSpec,
    compat: OpenAICompat,
    cache: TranslationCache,
    images: list[bytes | None] | None = None,
) -> bytes:
    """The serialized Chat Completions body: exactly
    ``dump_body(build_openai_body(request, spec, compat))``, with each message's JSON fragment
    reused from ``cache`` when the same message (same id, same content, same settings) was
    translated before. ``images``: the wire bytes of each of ``request.messages``, when the
    server just decoded it (:func:`protocol_py.codec.wire.take_images`), used as cache keys (a None
    image: that message translated uncached).

    Raises:
        InvalidValueError: as :func:`build_openai_body`.
    """
    body, replay = _body_head(request, spec, compat)
    body["messages"] = []
    head = dump_body(body)  # ends with "messages":[]} since messages is the last key
    fragments = [dump_body(m) for m in _system_messages(request)]
    settings = (replay, compat.reasoning_replay_field)
    repaired, ids = HISTORY.plan(
        request.messages,
        images,
        location=OPENAI_TOOL_CALL_ID,
        prefix="call_",
        valid=_valid_id,
    )
    messages: Sequence[Message] = request.messages
    paths: list[str] | None = None  # None: messages[i] of the request
    if repaired is not None:
        messages = [item.message for item in repaired]
        paths = [
            f"messages[{item.source}]" if item.source is not None else "messages"
            for item in repaired
        ]
        if images:
            # a repaired or inserted message is not the one the wire image shows: uncached
            by_source = list(images)
            images = [
                None if item.changed or item.source is None else by_source[item.source]
                for item in repaired
            ]

    def translate(i: int, message: Message) -> bytes:
        path = paths[i] if paths is not None else f"messages[{i}]"
        return b",".join(
            dump_body(m) for m in _translate_message(message, path, replay, compat, ids)
        )

    found = cache.fragments(settings, messages, translate, images or None)
    fragments.extend(fragment for fragment in found if fragment)
    # one join of the whole body (a join of the fragments, then of the body, copied the
    # conversation twice): head, fragment, ",", fragment, ..., "]}"
    parts = [b","] * (2 * len(fragments) + 1)
    parts[0] = head[:-2]
    parts[1:-1:2] = fragments
    parts[-1] = b"]}"
    if not fragments:
        parts = [head[:-2], b"]}"]
    return b"".join(parts)
