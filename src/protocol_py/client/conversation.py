"""Request builders for kernel authors: a :class:`Conversation` builds the next
StreamCompletionRequest (spec: "StreamCompletionRequest", "call_context"; docs/decisions.md#d16).

It holds what a kernel must carry from turn to turn and assigns what the spec requires:

* every message gets a ULID ``id`` (message ids are kernel-assigned, never the plugin's);
* ``call_context`` carries the session id (a ULID, fixed for the conversation), the turn id (a
  new ULID for each user turn; tool results stay in the turn that asked for them) and the
  working directory;
* the assistant message of the previous turn is appended exactly as the stream accumulator
  folded it (:class:`~protocol_py.rules.accumulate.AccumulatedResponse` or a
  :class:`~protocol_py.client.client.Completion`): thinking blocks keep their signatures and
  redacted
  thinking its data, so a vendor that signs reasoning accepts the replay;
* tool results for the calls of the last assistant message go into one user message, in call
  order of arrival;
* :meth:`Conversation.request` builds the request with the generation parameters, tools,
  assembled context and cache breakpoints, validated against the model's ModelSpec when one
  was given (:func:`~protocol_py.rules.request.validate_request`), otherwise against the rules
  that need none (:func:`~protocol_py.rules.request.validate_request_shape`).

A multi-turn exchange with a tool call::

    conv = Conversation("reference-large", spec=spec, tools=[weather_tool])
    conv.user("What is the weather in Paris? use tool")
    done = await client.complete(conv.request(), timeout=60)
    conv.assistant(done)
    for call in conv.pending_tool_calls():
        conv.tool_result(call.id, {"temperature_c": 21})
    done = await client.complete(conv.request(), timeout=60)
    conv.assistant(done)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Final, Protocol

from ulid import ULID

from protocol_py.codec.structs import to_struct
from protocol_py.errors import InvalidValueError, ValidationError, errors_only
from protocol_py.rules.request import validate_request, validate_request_shape
from protocol_py.version import PROTOCOL_VERSION
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import (
    ContentBlock,
    ContextSection,
    DocumentBlock,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol_py_gen.google.protobuf import Empty
from protocol_py_gen.model.v1 import (
    CacheBreakpoint,
    GenerationParams,
    ModelSpec,
    StreamCompletionRequest,
    ToolDeclaration,
)

__all__ = [
    "DEFAULT_CONTEXT_PROVIDER",
    "Conversation",
    "document",
    "image",
    "new_id",
    "text",
    "tool",
]

DEFAULT_CONTEXT_PROVIDER: Final = "kernel"
"""``ContextSection.provider`` of sections added by :meth:`Conversation.system`."""


def new_id() -> str:
    """A new ULID as its 26-character Crockford base32 string (message, session, turn ids)."""
    return str(ULID())


def text(value: str) -> ContentBlock:
    """A text content block."""
    return ContentBlock(text=TextBlock(text=value))


def image(data: bytes, media_type: str) -> ContentBlock:
    """An image content block: raw bytes and their IANA media type (``image/png``)."""
    return ContentBlock(image=ImageBlock(data=data, media_type=media_type))


def document(data: bytes, media_type: str, filename: str | None = None) -> ContentBlock:
    """A document content block: raw bytes, media type (``application/pdf``), optional name."""
    return ContentBlock(document=DocumentBlock(data=data, media_type=media_type, filename=filename))


def tool(name: str, description: str, input_schema: dict[str, Any]) -> ToolDeclaration:
    """A tool declaration; ``input_schema`` is the JSON Schema of the arguments object.

    Raises:
        InvalidValueError: the schema is not JSON a Struct can carry (docs/decisions.md#d5).
    """
    return ToolDeclaration(name=name, description=description, input_schema=to_struct(input_schema))


class _HasMessage(Protocol):
    """A folded stream: :class:`~protocol_py.rules.accumulate.AccumulatedResponse` or
    :class:`~protocol_py.client.client.Completion`."""

    @property
    def message(self) -> Message: ...


def _blocks(parts: Iterable[str | ContentBlock], what: str) -> list[ContentBlock]:
    out: list[ContentBlock] = []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            out.append(text(part))
        elif isinstance(part, ContentBlock):
            out.append(part)
        else:
            raise InvalidValueError(
                f"{what}[{i}]: expected str or content.v1.ContentBlock, got {type(part).__name__}",
                path=f"{what}[{i}]",
                rule="value.wrong_type",
            )
    if not out:
        raise InvalidValueError(
            f"{what}: a message needs at least one content block",
            path=what,
            rule="conversation.message.empty",
        )
    return out


class Conversation:
    """A session's canonical history and what the next StreamCompletionRequest needs.

    Args:
        model_id: The ``model_id`` of the requests (default: ``spec.id``).
        spec: The model's ModelSpec (from GetCapabilities); requests are validated against it.
        session_id: The session id (default: a new ULID).
        working_directory: ``call_context.working_directory`` (MAY be empty).
        tools: Tool declarations sent with every request.
        params: Generation parameters sent with every request (override per request).

    Attributes:
        messages: The history, in emission order (the list the next request carries).
        context: The assembled-context sections (:meth:`system`).
        tools, params, session_id, turn_id, working_directory, model_id, spec: As given;
            ``turn_id`` changes with every :meth:`user` call.

    Raises:
        InvalidValueError: neither ``model_id`` nor ``spec`` names the model.
    """

    def __init__(
        self,
        model_id: str | None = None,
        *,
        spec: ModelSpec | None = None,
        session_id: str | None = None,
        working_directory: str = "",
        tools: Sequence[ToolDeclaration] = (),
        params: GenerationParams | None = None,
    ) -> None:
        resolved = model_id or (spec.id if spec is not None else "")
        if not resolved:
            raise InvalidValueError(
                "model_id: give a model id or the model's ModelSpec",
                path="model_id",
                rule="conversation.model_id.missing",
            )
        self.model_id = resolved
        self.spec = spec
        self.session_id = session_id or new_id()
        self.turn_id = new_id()
        self.working_directory = working_directory
        self.tools: list[ToolDeclaration] = list(tools)
        self.params = params
        self.messages: list[Message] = []
        self.context: list[ContextSection] = []
        self._breakpoints: list[tuple[str, int]] = []

    # -- building the history ------------------------------------------------------------------

    def system(
        self, content: str, *, label: str = "system", provider: str = DEFAULT_CONTEXT_PROVIDER
    ) -> ContextSection:
        """Append an assembled-context section (the adapter maps it to the vendor's system
        slot); returns it."""
        section = ContextSection(provider=provider, label=label, content=[text(content)])
        self.context.append(section)
        return section

    def user(self, *parts: str | ContentBlock) -> Message:
        """Start a new turn (a new ``turn_id``) with one user message of ``parts``: strings
        become text blocks; pass :func:`image` / :func:`document` blocks for attachments.

        Raises:
            InvalidValueError: no parts, or a part that is neither str nor ContentBlock.
        """
        message = Message(role=Role.USER, id=new_id(), content=_blocks(parts, "parts"))
        self.turn_id = new_id()
        self.messages.append(message)
        return message

    def assistant(self, result: Message | _HasMessage) -> Message:
        """Append the previous turn's assistant message as accumulated (thinking blocks,
        signatures and tool calls kept verbatim); a message without an id gets a ULID.

        Args:
            result: An :class:`~protocol_py.rules.accumulate.AccumulatedResponse`, a
                :class:`~protocol_py.client.client.Completion` or an assistant ``Message``.

        Raises:
            InvalidValueError: not an assistant message, or one without content (a stream
                that failed before producing any; there is nothing to replay).
        """
        message = result if isinstance(result, Message) else getattr(result, "message", None)
        if not isinstance(message, Message) or message.role != Role.ASSISTANT:
            raise InvalidValueError(
                "assistant: expected an assistant Message, AccumulatedResponse or Completion",
                path="assistant",
                rule="conversation.assistant.role",
            )
        if not message.content:
            raise InvalidValueError(
                "assistant: the message has no content blocks (nothing to replay)",
                path="assistant.content",
                rule="conversation.message.empty",
            )
        if not message.id:
            message = Message(
                role=message.role,
                id=new_id(),
                content=list(message.content),
                produced_by_model_id=message.produced_by_model_id,
                produced_by_provider=message.produced_by_provider,
            )
        self.messages.append(message)
        return message

    def pending_tool_calls(self) -> list[ToolUseBlock]:
        """Tool calls of the last assistant message not yet answered by :meth:`tool_result`,
        in the order the model made them."""
        answered: set[str] = set()
        for message in reversed(self.messages):
            if message.role == Role.ASSISTANT:
                return [
                    b.tool_use
                    for b in message.content
                    if b.tool_use is not None and b.tool_use.id not in answered
                ]
            answered.update(b.tool_result.tool_use_id for b in message.content if b.tool_result)
        return []

    def tool_result(
        self,
        tool_use_id: str,
        result: str | Sequence[ContentBlock] | dict[str, Any] | list[Any],
        *,
        is_error: bool = False,
    ) -> Message:
        """Answer a tool call of the last assistant message (the turn stays the same).

        Results for calls of the same assistant message share one user message, as vendors
        require. ``result`` is text, content blocks, or JSON (sent as its text).

        Raises:
            InvalidValueError: ``tool_use_id`` is not a pending call of the last assistant
                message (rule ``conversation.tool_result.unknown_call``).
        """
        pending = {call.id for call in self.pending_tool_calls()}
        if tool_use_id not in pending:
            raise InvalidValueError(
                f"tool_use_id {tool_use_id[:64]!r} is not a pending tool call of the last "
                f"assistant message (pending: {', '.join(sorted(pending)[:10])[:400] or 'none'})",
                path="tool_use_id",
                rule="conversation.tool_result.unknown_call",
            )
        if isinstance(result, str):
            content = [text(result)]
        elif isinstance(result, dict) or (
            isinstance(result, list) and not all(isinstance(b, ContentBlock) for b in result)
        ):
            content = [text(json.dumps(result, ensure_ascii=False, sort_keys=True))]
        else:
            content = _blocks(result, "result")
        block = ContentBlock(
            tool_result=ToolResultBlock(tool_use_id=tool_use_id, content=content, is_error=is_error)
        )
        last = self.messages[-1]
        if last.role == Role.USER and all(b.tool_result is not None for b in last.content):
            last.content.append(block)
            return last
        message = Message(role=Role.USER, id=new_id(), content=[block])
        self.messages.append(message)
        return message

    # -- prompt caching -------------------------------------------------------------------------

    def cache_after_context(self) -> None:
        """Place a cache breakpoint after the assembled context (explicit-marker models)."""
        self._breakpoints.append(("context", 0))

    def cache_after_tools(self) -> None:
        """Place a cache breakpoint after the tool declarations (explicit-marker models)."""
        self._breakpoints.append(("tools", 0))

    def cache_after_message(self, index: int = -1) -> None:
        """Place a cache breakpoint after ``messages[index]`` (default: the current last
        message); a negative index is fixed now, so later messages do not move it.

        Raises:
            InvalidValueError: no such message.
        """
        if not -len(self.messages) <= index < len(self.messages):
            raise InvalidValueError(
                f"cache_after_message: index {index} outside the {len(self.messages)} messages",
                path="index",
                rule="conversation.cache_breakpoint.index",
            )
        self._breakpoints.append(("message", index % len(self.messages)))

    def _cache_breakpoints(self) -> list[CacheBreakpoint]:
        out = []
        for kind, index in self._breakpoints:
            if kind == "context":
                out.append(CacheBreakpoint(after_assembled_context=Empty()))
            elif kind == "tools":
                out.append(CacheBreakpoint(after_tools=Empty()))
            else:
                out.append(CacheBreakpoint(after_message_index=index))
        return out

    # -- the request ----------------------------------------------------------------------------

    def request(
        self,
        *,
        params: GenerationParams | None = None,
        tools: Sequence[ToolDeclaration] | None = None,
    ) -> StreamCompletionRequest:
        """The next StreamCompletionRequest: the whole history, assembled context, tools,
        params (``params``/``tools`` override the conversation's for this request only),
        cache breakpoints and ``call_context``.

        The request is read-only: its lists are new, but the Message (and ContextSection,
        ToolDeclaration) objects in them are the conversation's own, not copied, so building a
        request costs no copy of the whole history and its attachments. Mutating one changes
        the history every later request carries; to send a modified request, edit a copy
        (``copy.deepcopy(request)``: about 6 ms at 600 text messages, as long again as building
        it; benchmarks/conversation_request_copy.py).

        Raises:
            ValidationError: the request breaks a rule against the ModelSpec (or, without one,
                a rule that needs none); every violation is listed with its field path.
        """
        request = StreamCompletionRequest(
            model_id=self.model_id,
            messages=list(self.messages),
            tools=list(self.tools if tools is None else tools),
            params=params if params is not None else self.params,
            assembled_context=list(self.context),
            call_context=CallContext(
                session_id=self.session_id,
                turn_id=self.turn_id,
                working_directory=self.working_directory,
            ),
            cache_breakpoints=self._cache_breakpoints(),
            kernel_protocol_version=PROTOCOL_VERSION,
        )
        if self.spec is not None:
            violations = validate_request(request, self.spec)
        else:
            violations = validate_request_shape(request)
        errors = errors_only(violations)
        if errors:
            raise ValidationError(errors, "StreamCompletionRequest")
        return request
