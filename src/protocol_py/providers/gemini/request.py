"""StreamCompletionRequest -> Gemini ``generateContent`` body (docs/adapters.md "Gemini").

The same body serves the Gemini API and Vertex AI. Key order (fixed; ``contents`` last so that
turn N's body up to its last content is a byte prefix of turn N+1's): ``systemInstruction``,
``tools``, ``toolConfig``, ``generationConfig``, provider_options keys, ``contents``.

- assembled_context -> ``systemInstruction.parts``: one text part per context text block, in
  chain order.
- messages -> ``contents``: one content per message (role ``user`` or ``model``), never merged
  (merging joins parts that carry different signatures). A message left without parts (an
  interrupted turn holding only unsigned thinking) is not sent.
- text -> ``{text}`` (an empty text is sent only when it carries a signature); its
  ``gemini.part.thought_signature`` vendor data (protocol 1.2) -> the part's
  ``thoughtSignature``, verbatim.
- image -> ``{inlineData{mimeType, data}}`` (base64); document: PDF, audio and video ->
  ``inlineData``; text documents (``text/*``, JSON, XML, YAML) -> ``{text}`` with the decoded
  characters; any other type is refused (rule ``adapter.gemini.document.media_type``).
- tool_use -> ``{functionCall{name, args, id?}, thoughtSignature?}``: ``id`` only when the call
  carries the vendor's own id (``gemini.function_call.id``; a synthetic id never goes to the
  vendor), the signature from ``gemini.part.thought_signature``. On a Gemini 3 model, which
  refuses a step whose first call is unsigned, the first call of a model content that has no
  signature (a call the kernel injected, or history from another model) gets Google's
  documented stand-in ``skip_thought_signature_validator``.
- tool_result -> ``{functionResponse{id?, name, response}}``: ``name`` and ``id`` are those of
  the tool_use it answers (found in the history; an unknown id is refused, rule
  ``adapter.gemini.tool_result.unknown_call``), ``response`` is ``{"output": text}``, or
  ``{"error": text}`` when ``is_error``. Images and documents of a result go in
  ``functionResponse.parts`` on Gemini 3 and as parts after the responses otherwise. All the
  results of one message are in that message's one content.
- thinking: a signed block of this vendor with text -> ``{text, thought: true,
  thoughtSignature}``; a signed block with empty text is the protocol 1.1 form of a text
  part's signature: it goes on the text part right before it in the same content when that part
  is unsigned, else as ``{text: "", thoughtSignature}``. Unsigned thinking, redacted thinking and
  another vendor's blocks are not sent.
- Signatures are replayed only to the family that made them: a message produced by another
  provider (``produced_by_provider`` not ``gemini``/``vertex``), or by a model of another
  family (:func:`~protocol_py.providers.gemini.parts.signature_family`), is sent without its
  signatures and thinking.
- tools -> ``tools[{functionDeclarations[{name, description, parametersJsonSchema}]}]``; a name
  must start with a letter or ``_``, hold only ``[A-Za-z0-9_.:-]`` and be at most 128 characters,
  on Vertex AI only ``[A-Za-z0-9_.-]`` and at most 64 (rule ``adapter.gemini.tool.name``).
- tool_choice -> ``toolConfig.functionCallingConfig``: AUTO, ANY, NONE; SPECIFIC -> ANY with
  ``allowedFunctionNames: [name]``.
- ``max_output_tokens`` -> ``generationConfig.maxOutputTokens``, ``temperature`` ->
  ``temperature``. Stop sequences are not sent: the stream translator detects them, because
  Gemini's STOP does not say which sequence matched.
- Thinking (``generationConfig.thinkingConfig``, only for a model that reasons):
  ``includeThoughts: true`` (the adapter's ``include_thoughts`` setting); ``thinking_effort`` ->
  ``thinkingLevel`` (upper case, collapsed onto the model's levels); else
  ``thinking_budget_tokens`` -> ``thinkingBudget``; ``disable_thinking`` true ->
  ``thinkingBudget: 0``; false on a budget model -> ``thinkingBudget: -1`` (dynamic). A level and
  a budget are never sent together.
- provider_options: top-level keys are merged into the body (``safetySettings``,
  ``labels``, ...); a ``generationConfig`` object is merged key by key into the adapter's. The
  adapter's own keys (``contents``, ``systemInstruction``, ``tools``, ``toolConfig``,
  ``cachedContent``, and inside ``generationConfig`` ``maxOutputTokens``, ``temperature``,
  ``stopSequences``, ``thinkingConfig``, ``candidateCount``) are refused (rule
  ``adapter.provider_options.reserved``).
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from protocol_py.codec.structs import from_struct
from protocol_py.errors import InvalidValueError
from protocol_py.providers.gemini.parts import (
    FUNCTION_CALL_ID,
    PROVIDER_NAMES,
    SKIP_SIGNATURE,
    THOUGHT_SIGNATURE,
    signature_family,
    vendor_value,
)
from protocol_py.providers.http.request import (
    block_case,
    collapse_effort,
    context_texts,
    document_text,
    is_pdf,
    is_text_document,
    tool_input,
)
from protocol_py_gen.content.v1 import ContentBlock, Message, Role
from protocol_py_gen.model.v1 import ModelSpec, StreamCompletionRequest, ToolChoiceMode

__all__ = [
    "CACHEABLE_KEYS",
    "GeminiOptions",
    "build_gemini_body",
    "build_gemini_count_body",
    "check_function_name",
    "message_kept",
]

log = logging.getLogger("protocol_py.providers")

CACHEABLE_KEYS: Final = ("systemInstruction", "tools", "toolConfig")
"""Body members that move into a ``cachedContents`` entry (a request that uses a cache must not
set them)."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,127}")
_VERTEX_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_RESERVED_TOP = frozenset({"contents", "systemInstruction", "tools", "toolConfig", "cachedContent"})
_RESERVED_CONFIG = frozenset(
    {"maxOutputTokens", "temperature", "stopSequences", "thinkingConfig", "candidateCount"}
)
_MEDIA_PREFIXES = ("audio/", "video/")


@dataclass(frozen=True, slots=True)
class GeminiOptions:
    """Settings of the request translation.

    Attributes:
        provider: This provider's name (``gemini`` or ``vertex``).
        include_thoughts: Ask for thought summaries (``includeThoughts``) on models that reason.
    """

    provider: str = "gemini"
    include_thoughts: bool = True


def check_function_name(name: str, path: str, *, vertex: bool = False) -> None:
    """Raise InvalidValueError unless ``name`` is a function name the API accepts.

    Gemini API: a letter or ``_`` first, then letters, digits, ``_ . : -``, at most 128
    characters. Vertex AI: a letter or ``_`` first, then letters, digits, ``_ . -`` (no colon),
    at most 64 characters (Vertex AI reference, ``FunctionDeclaration.name``).
    """
    if vertex:
        if _VERTEX_NAME.fullmatch(name):
            return
        rule_text = "letters, digits, '_', '.' or '-', at most 64 characters on Vertex AI"
    else:
        if _NAME.fullmatch(name):
            return
        rule_text = "letters, digits, '_', '.', ':' or '-', at most 128 characters"
    raise InvalidValueError(
        f"{path}: {name[:80]!r} is not a Gemini function name (a letter or '_' first, then "
        f"{rule_text}) (rule adapter.gemini.tool.name)",
        path=path,
        rule="adapter.gemini.tool.name",
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _opaque(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidValueError(
            f"{where}: not the UTF-8 bytes of a vendor string (rule adapter.gemini.opaque_utf8)",
            path=where,
            rule="adapter.gemini.opaque_utf8",
        ) from None


def _media_part(block: ContentBlock, name: str, value: Any, where: str) -> dict[str, Any]:
    if name == "image":
        return {"inlineData": {"mimeType": value.media_type, "data": _b64(value.data)}}
    media_type = value.media_type.split(";", 1)[0].strip().lower()
    if is_pdf(value.media_type) or media_type.startswith(_MEDIA_PREFIXES):
        return {"inlineData": {"mimeType": media_type, "data": _b64(value.data)}}
    if is_text_document(value.media_type):
        return {"text": document_text(value.media_type, value.data, f"{where}.document")}
    raise InvalidValueError(
        f"{where}.document.media_type: {value.media_type!r} is not a document type Gemini "
        "takes (PDF, audio, video or text) (rule adapter.gemini.document.media_type)",
        path=f"{where}.document.media_type",
        rule="adapter.gemini.document.media_type",
    )


@dataclass(frozen=True, slots=True)
class _Call:
    name: str
    vendor_id: str | None


def _calls(messages: Sequence[Message]) -> dict[str, _Call]:
    """Every tool_use of the conversation: id -> its name and vendor id."""
    out: dict[str, _Call] = {}
    for message in messages:
        for block in message.content:
            use = block.tool_use
            if use is not None:
                out[use.id] = _Call(use.name, vendor_value(use.vendor_data, FUNCTION_CALL_ID))
    return out


class _Target:
    """What the model the body is for accepts back."""

    def __init__(self, spec: ModelSpec, options: GeminiOptions) -> None:
        self.family = signature_family(spec.id)
        self.gemini3 = bool(self.family and self.family.startswith("gemini-3"))
        self.options = options

    def keeps_signatures(self, message: Message) -> bool:
        producer = message.produced_by_provider
        if producer and producer not in PROVIDER_NAMES:
            return False
        made_by = signature_family(message.produced_by_model_id)
        return not (made_by and self.family and made_by != self.family)

    def keeps_thinking(self, message: Message) -> bool:
        return message.produced_by_provider in PROVIDER_NAMES and self.keeps_signatures(message)


def _tool_result(
    value: Any, where: str, calls: Mapping[str, _Call], target: _Target
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The functionResponse part of one tool result, and its media parts."""
    call = calls.get(value.tool_use_id)
    if call is None:
        raise InvalidValueError(
            f"{where}.tool_result.tool_use_id: {value.tool_use_id[:80]!r} answers no tool_use "
            "of the conversation; Gemini needs the called function's name "
            "(rule adapter.gemini.tool_result.unknown_call)",
            path=f"{where}.tool_result.tool_use_id",
            rule="adapter.gemini.tool_result.unknown_call",
        )
    texts: list[str] = []
    media: list[dict[str, Any]] = []
    for k, inner in enumerate(value.content):
        iname, ivalue = block_case(inner)
        inner_where = f"{where}.tool_result.content[{k}]"
        if iname == "text":
            texts.append(ivalue.text)
        elif iname in ("image", "document"):
            part = _media_part(inner, iname, ivalue, inner_where)
            if "text" in part:
                texts.append(part["text"])
            else:
                media.append(part)
        else:
            raise InvalidValueError(
                f"{inner_where}: {iname} blocks cannot be a tool result "
                "(rule adapter.gemini.tool_result.block)",
                path=inner_where,
                rule="adapter.gemini.tool_result.block",
            )
    response: dict[str, Any] = {}
    if call.vendor_id:
        response["id"] = call.vendor_id
    response["name"] = call.name
    response["response"] = {("error" if value.is_error else "output"): "".join(texts)}
    if media and target.gemini3:
        response["parts"] = media
        media = []
    return {"functionResponse": response}, media


def _message_parts(
    message: Message, path: str, calls: Mapping[str, _Call], target: _Target
) -> list[dict[str, Any]]:
    signatures = target.keeps_signatures(message)
    thinking = target.keeps_thinking(message)
    parts: list[dict[str, Any]] = []
    trailing_media: list[dict[str, Any]] = []
    first_call: dict[str, Any] | None = None
    for j, block in enumerate(message.content):
        where = f"{path}.content[{j}]"
        name, value = block_case(block)
        if name == "text":
            signature = vendor_value(value.vendor_data, THOUGHT_SIGNATURE) if signatures else None
            if not value.text and signature is None:
                continue
            part: dict[str, Any] = {"text": value.text}
            if signature is not None:
                part["thoughtSignature"] = signature
            parts.append(part)
        elif name in ("image", "document"):
            parts.append(_media_part(block, name, value, where))
        elif name == "tool_use":
            call: dict[str, Any] = {
                "name": value.name,
                "args": tool_input(value.input, f"{where}.tool_use.input"),
            }
            vendor_id = vendor_value(value.vendor_data, FUNCTION_CALL_ID)
            if vendor_id:
                call["id"] = vendor_id
            part = {"functionCall": call}
            signature = vendor_value(value.vendor_data, THOUGHT_SIGNATURE) if signatures else None
            if signature is not None:
                part["thoughtSignature"] = signature
            if first_call is None:
                first_call = part
            parts.append(part)
        elif name == "tool_result":
            response, media = _tool_result(value, where, calls, target)
            parts.append(response)
            trailing_media.extend(media)
        elif name == "thinking":
            if not thinking or not value.signature:
                continue  # unsigned summaries carry nothing Gemini uses
            signature = _opaque(value.signature, f"{where}.thinking.signature")
            if value.text:
                parts.append({"text": value.text, "thought": True, "thoughtSignature": signature})
            elif parts and set(parts[-1]) == {"text"} and not parts[-1].get("thought"):
                parts[-1]["thoughtSignature"] = signature  # the 1.1 text-signature form
            else:
                parts.append({"text": "", "thoughtSignature": signature})
        elif name == "vendor_block":
            log.warning(
                "%s: a %s block of vendor %r is not sent to Gemini",
                where,
                value.block_type[:64],
                value.vendor[:64],
            )
        elif name != "redacted_thinking":
            raise InvalidValueError(
                f"{where}: unknown block {name} (rule adapter.gemini.block)",
                path=where,
                rule="adapter.gemini.block",
            )
    if target.gemini3 and first_call is not None and "thoughtSignature" not in first_call:
        first_call["thoughtSignature"] = SKIP_SIGNATURE
    return parts + trailing_media


def _contents(
    request: StreamCompletionRequest, target: _Target
) -> tuple[list[dict[str, Any]], list[bool]]:
    messages = list(request.messages)
    calls = _calls(messages)
    out: list[dict[str, Any]] = []
    kept: list[bool] = []
    for i, message in enumerate(messages):
        path = f"messages[{i}]"
        if message.role not in (Role.USER, Role.ASSISTANT):
            raise InvalidValueError(
                f"{path}.role: unspecified (rule adapter.message.role)",
                path=f"{path}.role",
                rule="adapter.message.role",
            )
        parts = _message_parts(message, path, calls, target)
        kept.append(bool(parts))
        if parts:
            out.append({"role": "user" if message.role == Role.USER else "model", "parts": parts})
    return out, kept


def _tools(request: StreamCompletionRequest, options: GeminiOptions) -> list[dict[str, Any]]:
    declarations: list[dict[str, Any]] = []
    vertex = options.provider == "vertex"
    for i, tool in enumerate(request.tools):
        check_function_name(tool.name, f"tools[{i}].name", vertex=vertex)
        entry: dict[str, Any] = {"name": tool.name}
        if tool.description:
            entry["description"] = tool.description
        if tool.input_schema is not None:
            entry["parametersJsonSchema"] = from_struct(
                tool.input_schema, path=f"tools[{i}].input_schema"
            )
        declarations.append(entry)
    return [{"functionDeclarations": declarations}] if declarations else []


def _tool_config(request: StreamCompletionRequest) -> dict[str, Any] | None:
    params = request.params
    choice = params.tool_choice if params is not None else None
    if choice is None or not request.tools:
        return None
    if choice.mode == ToolChoiceMode.AUTO:
        config: dict[str, Any] = {"mode": "AUTO"}
    elif choice.mode == ToolChoiceMode.ANY:
        config = {"mode": "ANY"}
    elif choice.mode == ToolChoiceMode.NONE:
        config = {"mode": "NONE"}
    elif choice.mode == ToolChoiceMode.SPECIFIC:
        config = {"mode": "ANY", "allowedFunctionNames": [choice.tool_name or ""]}
    else:
        return None
    return {"functionCallingConfig": config}


def _generation_config(
    request: StreamCompletionRequest, spec: ModelSpec, options: GeminiOptions
) -> dict[str, Any]:
    params = request.params
    config: dict[str, Any] = {}
    if params is not None:
        if params.max_output_tokens is not None:
            config["maxOutputTokens"] = params.max_output_tokens
        if params.temperature is not None:
            config["temperature"] = params.temperature
    thinking = spec.thinking
    if thinking is None or not thinking.supported:
        return config
    cfg: dict[str, Any] = {}
    if options.include_thoughts:
        cfg["includeThoughts"] = True
    if params is not None:
        if params.disable_thinking:
            cfg["thinkingBudget"] = 0
        elif params.thinking_effort is not None and thinking.effort is not None:
            level = collapse_effort(params.thinking_effort, list(thinking.effort.levels))
            cfg["thinkingLevel"] = level.upper()
        elif params.thinking_budget_tokens is not None:
            cfg["thinkingBudget"] = params.thinking_budget_tokens
        elif params.disable_thinking is False and thinking.budget is not None:
            cfg["thinkingBudget"] = -1
    if cfg:
        config["thinkingConfig"] = cfg
    return config


def _merge_options(body: dict[str, Any], request: StreamCompletionRequest) -> None:
    if request.provider_options is None:
        return
    options = from_struct(request.provider_options, path="provider_options")
    for key, value in options.items():
        if key in _RESERVED_TOP:
            raise InvalidValueError(
                f"provider_options.{key}: the adapter sets this field "
                "(rule adapter.provider_options.reserved)",
                path=f"provider_options.{key}",
                rule="adapter.provider_options.reserved",
            )
        if key == "generationConfig" and isinstance(value, dict):
            config = body.setdefault("generationConfig", {})
            for inner, setting in value.items():
                if inner in _RESERVED_CONFIG:
                    raise InvalidValueError(
                        f"provider_options.generationConfig.{inner}: the adapter sets this "
                        "field from the request (rule adapter.provider_options.reserved)",
                        path=f"provider_options.generationConfig.{inner}",
                        rule="adapter.provider_options.reserved",
                    )
                config[inner] = setting
        else:
            body[key] = value


def build_gemini_body(
    request: StreamCompletionRequest, spec: ModelSpec, options: GeminiOptions | None = None
) -> dict[str, Any]:
    """Build the ``generateContent`` body for ``request`` against ``spec`` (module docstring).

    Returns:
        An insertion-ordered dict with ``contents`` last.

    Raises:
        InvalidValueError: a block Gemini cannot take, a tool name it refuses, a tool result
            answering no call, signature bytes that are not UTF-8, or a reserved
            provider_options key; the message names the field path and the rule.
    """
    options = options or GeminiOptions()
    target = _Target(spec, options)
    body: dict[str, Any] = {}
    system = context_texts(request.assembled_context)
    if system:
        body["systemInstruction"] = {"parts": [{"text": text} for text in system]}
    tools = _tools(request, options)
    if tools:
        body["tools"] = tools
    tool_config = _tool_config(request)
    if tool_config is not None:
        body["toolConfig"] = tool_config
    config = _generation_config(request, spec, options)
    if config:
        body["generationConfig"] = config
    _merge_options(body, request)
    body["contents"], _ = _contents(request, target)
    return body


def message_kept(
    request: StreamCompletionRequest, spec: ModelSpec, options: GeminiOptions | None = None
) -> list[bool]:
    """For each message, whether it became a content of the body (one with parts)."""
    _, kept = _contents(request, _Target(spec, options or GeminiOptions()))
    return kept


def build_gemini_count_body(
    request: StreamCompletionRequest,
    spec: ModelSpec,
    options: GeminiOptions | None = None,
    *,
    vertex: bool,
) -> dict[str, Any]:
    """The ``countTokens`` body: the form that counts the system instruction and tools.

    Gemini API: ``{generateContentRequest: {model: "models/<id>", contents,
    systemInstruction, tools}}``; Vertex AI: ``{contents, systemInstruction, tools}``.
    """
    full = build_gemini_body(request, spec, options)
    inner: dict[str, Any] = {} if vertex else {"model": f"models/{request.model_id}"}
    for key in ("contents", "systemInstruction", "tools"):
        if key in full:
            inner[key] = full[key]
    return inner if vertex else {"generateContentRequest": inner}
