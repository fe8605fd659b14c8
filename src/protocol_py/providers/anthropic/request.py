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

History repairs and refusals (docs/adapters.md "Requests a vendor would refuse"), before the
vendor is called:

- a tool call left unanswered gets a "not executed" error result
  (:func:`protocol_py.providers.http.history.answer_dangling_calls`); in a user message the
  tool_result blocks come first (in their order), the other blocks after them in theirs;
- tool-call ids are the vendor's own where it is kept (``anthropic.tool_use.id``), else the
  kernel's; an id outside Anthropic's ``[A-Za-z0-9_-]+`` (another vendor's call) is sent as a
  stable derived ``toolu_`` id, its results too;
- thinking in the final assistant turn (the assistant messages after the last user message that
  is not only tool results): with ``thinking: enabled`` that turn must start with a replayable
  thinking or redacted_thinking block; when it does not (the model was switched, thinking was
  off for that step), the request continues a tool loop in which the model does not think
  again, so it is sent without ``thinking`` and without thinking blocks in that turn (same
  answer, no 400). With thinking off, thinking blocks of the final turn are not sent;
- ThinkingSpec.constraints (protocol 1.2) are refusals: max_tokens not above the budget
  (``request.params.thinking_budget_tokens.not_below_max_output``), a forced tool choice
  (``request.params.tool_choice.thinking_forced``), a temperature other than the fixed one
  (``request.params.temperature.thinking_fixed``);
- stop sequences the model does not take are refused (``request.params.stop_sequences.*``);
- cache markers: at most ``CachingSpec.max_breakpoints`` (Anthropic: 4, provider_options'
  markers counted) (``request.cache_breakpoints.too_many``); ``ttl_seconds`` 3600 is
  ``cache_control.ttl: "1h"``, 300 or none the default 5 minutes, anything the model does not
  declare is refused (``request.cache_breakpoints.ttl_unsupported``), and a one-hour marker
  after a 5-minute one is refused (``adapter.anthropic.cache_control.ttl_order``: Anthropic
  requires longer lifetimes first).

Vendor-owned content (protocol 1.2): a ``vendor_block`` of vendor ``anthropic`` is sent back
as the JSON object it holds, in place; one of another vendor is dropped with a warning. A text
block's ``anthropic.text.citations`` vendor data is sent back as its ``citations``.
"""

from __future__ import annotations

import base64
import logging
import re
from dataclasses import dataclass
from typing import Any

from protocol_py.codec.structs import from_struct
from protocol_py.errors import InvalidValueError
from protocol_py.providers.anthropic.stream import ANTHROPIC_VENDOR
from protocol_py.providers.http.call_ids import ANTHROPIC_TOOL_USE_ID
from protocol_py.providers.http.history import Repaired, WireIds, repaired_history
from protocol_py.providers.http.request import (
    CacheTargets,
    block_case,
    check_stop_sequences,
    collapse_effort,
    context_texts,
    document_text,
    is_pdf,
    is_text_document,
    merge_provider_options,
    stored_json,
    tool_input,
)
from protocol_py.rules.vendor_data import ANTHROPIC_TEXT_CITATIONS
from protocol_py_gen.content.v1 import ContentBlock, Message, Role
from protocol_py_gen.model.v1 import (
    GenerationParams,
    ModelSpec,
    StreamCompletionRequest,
    ThinkingReplay,
    ToolChoiceMode,
)

__all__ = ["build_anthropic_body", "build_anthropic_count_body"]

_log = logging.getLogger("protocol_py.providers")

_EPHEMERAL = {"type": "ephemeral"}
_THINKING = frozenset({"thinking", "redacted_thinking"})
_CACHEABLE = frozenset({"text", "image", "document", "tool_use", "tool_result"})
_TOOL_ID = re.compile(r"[A-Za-z0-9_-]+")
"""The tool_use ids the Messages API accepts."""

DEFAULT_MAX_MARKERS = 4
"""Anthropic's limit on cache_control markers per request, when the model declares none."""

_TTL = {300: None, 3600: "1h"}
"""CacheBreakpoint.ttl_seconds -> cache_control.ttl (None: the default 5 minutes)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _decode_opaque(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidValueError(
            f"{where}: not the UTF-8 bytes of a vendor string (rule adapter.anthropic.opaque_utf8)"
        ) from None


@dataclass(slots=True)
class _Context:
    replay: ThinkingReplay
    ids: WireIds


def _block(block: ContentBlock, where: str, ctx: _Context) -> dict[str, Any] | None:
    name, value = block_case(block)
    if name == "text":
        if not value.text:
            return None
        text: dict[str, Any] = {"type": "text", "text": value.text}
        for k, entry in enumerate(value.vendor_data):
            if entry.location == ANTHROPIC_TEXT_CITATIONS:
                text["citations"] = stored_json(
                    entry.value,
                    f"{where}.text.vendor_data[{k}].value",
                    "adapter.anthropic.text.citations",
                    list,
                )
        return text
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
            text_data = document_text(value.media_type, value.data, f"{where}.document")
            source = {"type": "text", "media_type": "text/plain", "data": text_data}
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
            "id": ctx.ids(value.id),
            "name": value.name,
            "input": tool_input(value.input, f"{where}.tool_use.input"),
        }
    if name == "tool_result":
        inner = [
            b
            for k, item in enumerate(value.content)
            if (b := _block(item, f"{where}.tool_result.content[{k}]", ctx)) is not None
        ]
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": ctx.ids(value.tool_use_id)}
        result["content"] = inner
        if value.is_error:
            result["is_error"] = True
        return result
    if name == "thinking":
        if ctx.replay == ThinkingReplay.OMIT or not value.signature:
            return None  # unsigned thinking of an incomplete turn is never replayed (B09)
        return {
            "type": "thinking",
            "thinking": value.text,
            "signature": _decode_opaque(value.signature, f"{where}.thinking.signature"),
        }
    if name == "redacted_thinking":
        if ctx.replay == ThinkingReplay.OMIT:
            return None
        return {
            "type": "redacted_thinking",
            "data": _decode_opaque(value.data, f"{where}.redacted_thinking.data"),
        }
    if name == "vendor_block":
        if value.vendor != ANTHROPIC_VENDOR:
            _log.warning(
                "%s: a %s block of vendor %s is not sent to Anthropic",
                where,
                value.block_type[:64],
                value.vendor[:64],
            )
            return None
        obj: dict[str, Any] = stored_json(
            value.data, f"{where}.vendor_block.data", "adapter.anthropic.vendor_block", dict
        )
        return obj
    raise InvalidValueError(f"{where}: unknown block {name} (rule adapter.anthropic.block)")


@dataclass(slots=True)
class _Turn:
    role: str
    blocks: list[dict[str, Any]]
    index: int | None  # the request message it came from (None: inserted by a repair)


def _translate(
    repaired: list[Repaired], replay: ThinkingReplay, ids: WireIds, provider: str
) -> list[_Turn]:
    turns: list[_Turn] = []
    for item in repaired:
        message, i = item.message, item.source
        path = f"messages[{i}]" if i is not None else "messages"
        if message.role not in (Role.USER, Role.ASSISTANT):
            raise InvalidValueError(f"{path}.role: unspecified (rule adapter.message.role)")
        role = "user" if message.role == Role.USER else "assistant"
        foreign = bool(message.produced_by_provider) and message.produced_by_provider != provider
        # another provider's signatures cannot be verified here: its reasoning is not replayed
        ctx = _Context(replay=ThinkingReplay.OMIT if foreign else replay, ids=ids)
        blocks = [
            b
            for j, block in enumerate(message.content)
            if (b := _block(block, f"{path}.content[{j}]", ctx)) is not None
        ]
        if role == "user":
            # tool results open the user message that follows a tool turn; the other blocks
            # follow them, each group in its own order
            results = [b for b in blocks if b["type"] == "tool_result"]
            if results and blocks[: len(results)] != results:
                blocks = results + [b for b in blocks if b["type"] != "tool_result"]
        turns.append(_Turn(role, blocks, i))
    return turns


def _final_turn(turns: list[_Turn]) -> list[_Turn]:
    """The assistant messages of the turn in progress: those after the last user message that
    holds anything but tool results."""
    for k in range(len(turns) - 1, -1, -1):
        turn = turns[k]
        if turn.role == "user" and any(b["type"] != "tool_result" for b in turn.blocks):
            return [t for t in turns[k + 1 :] if t.role == "assistant"]
    return [t for t in turns if t.role == "assistant"]


def _reconcile_thinking(body: dict[str, Any], turns: list[_Turn], spec: ModelSpec) -> None:
    """Anthropic's rule for thinking in the final assistant turn (module docstring)."""
    final = [t for t in _final_turn(turns) if t.blocks]
    if not final:
        return
    thinking = body.get("thinking")
    mode = thinking.get("type") if isinstance(thinking, dict) else None
    if mode == "enabled" and final[0].blocks[0]["type"] not in _THINKING:
        # the turn started without thinking: the model will not think again before the
        # turn ends, so thinking off gives the same answer and a body Anthropic accepts
        del body["thinking"]
        mode = "disabled"
        where = f"messages[{final[0].index}]" if final[0].index is not None else "messages"
        _log.info(
            "%s: the tool loop in progress began without thinking: sent without thinking", where
        )
    adaptive = spec.thinking is not None and spec.thinking.adaptive_by_default
    if mode == "disabled" or (mode is None and not adaptive):
        for turn in final:
            turn.blocks = [b for b in turn.blocks if b["type"] not in _THINKING]


def _marker(ttl: int | None, where: str, spec: ModelSpec) -> dict[str, Any]:
    if ttl is None:
        return dict(_EPHEMERAL)
    caching = spec.caching
    accepted = list(caching.breakpoint_ttl_seconds) if caching is not None else []
    if ttl not in accepted or ttl not in _TTL:
        raise InvalidValueError(
            f"{where}.ttl_seconds: {ttl} s is not a cache lifetime model {spec.id!r} declares "
            f"({accepted or 'none'}) (rule request.cache_breakpoints.ttl_unsupported)",
            path=f"{where}.ttl_seconds",
            rule="request.cache_breakpoints.ttl_unsupported",
        )
    name = _TTL[ttl]
    return dict(_EPHEMERAL) if name is None else {**_EPHEMERAL, "ttl": name}


def _messages(turns: list[_Turn], cache: CacheTargets, spec: ModelSpec) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for turn in turns:
        blocks = turn.blocks
        if not blocks:
            continue  # e.g. an interrupted turn holding only unsigned thinking (B09)
        marked = False
        i = turn.index
        if i is not None and i in cache.message_indexes:
            # thinking and vendor blocks cannot carry cache_control: mark the last that can
            for k in range(len(blocks) - 1, -1, -1):
                if blocks[k]["type"] in _CACHEABLE:
                    marker = _marker(cache.ttl_seconds.get(i), "cache_breakpoints", spec)
                    blocks[k] = {**blocks[k], "cache_control": marker}
                    marked = True
                    break
        if (
            turn.role == "user"
            and len(blocks) == 1
            and blocks[0]["type"] == "text"
            and not marked
            and "citations" not in blocks[0]
        ):
            out.append({"role": turn.role, "content": blocks[0]["text"]})
        else:
            out.append({"role": turn.role, "content": blocks})
    return out


def _tools(
    request: StreamCompletionRequest, cache: CacheTargets, spec: ModelSpec
) -> list[dict[str, Any]]:
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
        tools[-1]["cache_control"] = _marker(
            cache.ttl_seconds.get("tools"), "cache_breakpoints", spec
        )
    return tools


def _system(
    request: StreamCompletionRequest, cache: CacheTargets, spec: ModelSpec
) -> list[dict[str, Any]]:
    system: list[dict[str, Any]] = [
        {"type": "text", "text": text} for text in context_texts(request.assembled_context)
    ]
    if system and cache.after_context:
        system[-1]["cache_control"] = _marker(
            cache.ttl_seconds.get("context"), "cache_breakpoints", spec
        )
    return system


def _replay(spec: ModelSpec) -> ThinkingReplay:
    replay = spec.thinking.replay if spec.thinking is not None else ThinkingReplay.UNSPECIFIED
    return ThinkingReplay.ALL if replay == ThinkingReplay.UNSPECIFIED else replay


def _thinking_on(params: GenerationParams | None, spec: ModelSpec) -> bool:
    """Whether the model reasons for this request (ThinkingSpec.constraints, protocol 1.2)."""
    thinking = spec.thinking
    if thinking is None or not thinking.supported:
        return False
    if params is not None and params.disable_thinking:
        return False
    if params is not None and (
        params.thinking_effort is not None or params.thinking_budget_tokens is not None
    ):
        return True
    budget = thinking.budget
    return thinking.adaptive_by_default or (
        budget is not None and budget.default is not None and budget.default > 0
    )


def check_thinking_constraints(
    request: StreamCompletionRequest, spec: ModelSpec, max_tokens: int
) -> None:
    """Refuse what the vendor refuses while the model reasons (ThinkingSpec.constraints).

    Raises:
        InvalidValueError: naming the field and the rule (module docstring).
    """
    thinking = spec.thinking
    constraints = thinking.constraints if thinking is not None else None
    params = request.params
    if constraints is None or not _thinking_on(params, spec):
        return
    budget = params.thinking_budget_tokens if params is not None else None
    if budget is None and thinking is not None and thinking.budget is not None:
        budget = thinking.budget.default
    if constraints.max_output_exceeds_budget and budget is not None and max_tokens <= budget:
        raise InvalidValueError(
            f"params.thinking_budget_tokens: the budget {budget} is not below max_tokens "
            f"{max_tokens} (params.max_output_tokens, else the model's maximum); model "
            f"{spec.id!r} counts reasoning inside max_tokens "
            "(rule request.params.thinking_budget_tokens.not_below_max_output)",
            path="params.thinking_budget_tokens",
            rule="request.params.thinking_budget_tokens.not_below_max_output",
        )
    if params is None:
        return
    choice = params.tool_choice
    if (
        constraints.forced_tool_choice_refused
        and choice is not None
        and request.tools
        and choice.mode in (ToolChoiceMode.ANY, ToolChoiceMode.SPECIFIC)
    ):
        raise InvalidValueError(
            f"params.tool_choice: model {spec.id!r} does not accept a forced tool choice "
            "while it reasons (rule request.params.tool_choice.thinking_forced)",
            path="params.tool_choice",
            rule="request.params.tool_choice.thinking_forced",
        )
    fixed = constraints.fixed_temperature
    if fixed is not None and params.temperature is not None and params.temperature != fixed:
        raise InvalidValueError(
            f"params.temperature: model {spec.id!r} takes only temperature {fixed:g} while it "
            f"reasons, not {params.temperature:g} (rule request.params.temperature.thinking_fixed)",
            path="params.temperature",
            rule="request.params.temperature.thinking_fixed",
        )


def _check_markers(body: dict[str, Any], spec: ModelSpec) -> None:
    """At most the model's marker limit, longer lifetimes before shorter (module docstring)."""
    markers: list[dict[str, Any]] = []
    for key in ("tools", "system"):
        value = body.get(key)
        if isinstance(value, list):
            markers.extend(
                b["cache_control"] for b in value if isinstance(b, dict) and "cache_control" in b
            )
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, list):
            markers.extend(
                b["cache_control"] for b in content if isinstance(b, dict) and "cache_control" in b
            )
    caching = spec.caching
    limit = (
        caching.max_breakpoints
        if caching is not None and caching.max_breakpoints is not None
        else DEFAULT_MAX_MARKERS
    )
    if len(markers) > limit:
        raise InvalidValueError(
            f"cache_breakpoints: {len(markers)} cache markers (provider_options' included), "
            f"model {spec.id!r} takes at most {limit} (rule request.cache_breakpoints.too_many)",
            path="cache_breakpoints",
            rule="request.cache_breakpoints.too_many",
        )
    short_seen = False
    for marker in markers:
        long = isinstance(marker, dict) and marker.get("ttl") == "1h"
        if long and short_seen:
            raise InvalidValueError(
                "cache_breakpoints: a one-hour cache marker after a 5-minute one; Anthropic "
                "takes longer lifetimes first (rule adapter.anthropic.cache_control.ttl_order)",
                path="cache_breakpoints",
                rule="adapter.anthropic.cache_control.ttl_order",
            )
        short_seen = short_seen or not long


def _valid_id(value: str) -> bool:
    return _TOOL_ID.fullmatch(value) is not None


def build_anthropic_body(
    request: StreamCompletionRequest, spec: ModelSpec, *, provider: str = "anthropic"
) -> dict[str, Any]:
    """Build the Messages API body for ``request`` against the model ``spec``.

    Args:
        request: The validated request.
        spec: The ModelSpec it was validated against (replay rule, caching axes, max output,
            thinking constraints).
        provider: This provider's name: thinking of assistant messages whose
            ``produced_by_provider`` names another provider is not replayed.

    Returns:
        An insertion-ordered dict with ``messages`` last.

    Raises:
        InvalidValueError: an unsupported block, non-UTF-8 signature bytes, a reserved
            provider_options key, or a request the vendor refuses (module docstring); the
            message names the field path and rule.
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
    check_thinking_constraints(request, spec, max_tokens)
    check_stop_sequences(request, spec)
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
    tools = _tools(request, cache, spec)
    if tools:
        body["tools"] = tools
    system = _system(request, cache, spec)
    if system:
        body["system"] = system
    merge_provider_options(body, request)
    messages: list[Message] = list(request.messages)
    ids = WireIds(messages, location=ANTHROPIC_TOOL_USE_ID, prefix="toolu_", valid=_valid_id)
    turns = _translate(repaired_history(messages), _replay(spec), ids, provider)
    _reconcile_thinking(body, turns, spec)
    body["messages"] = _messages(turns, cache, spec)
    if (
        cache.after_context
        or cache.after_tools
        or cache.message_indexes
        or request.provider_options
    ):
        _check_markers(body, spec)
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
