"""Conversation repairs every adapter applies before translating a request's history.

Vendors refuse a history in which a tool call is not answered in the very next message
(Anthropic: "tool_use ids were found without tool_result blocks immediately after"; Chat
Completions: "An assistant message with 'tool_calls' must be followed by tool messages
responding to each 'tool_call_id'"). An agent loop produces such a history whenever the user
moves on instead of letting a pending call run (the call was cancelled, or the harness never ran
it). The call was not executed, so saying exactly that to the model changes nothing that was
asked: :func:`answer_dangling_calls` gives each unanswered call an error result
(:data:`NOT_EXECUTED`) at the start of the next user message, or in a user message of its own
when an assistant message follows directly. The dangling call is never sent alone.

Tool-call ids on the wire (:class:`WireIds`): the kernel's id, or the vendor's own id kept
as VendorData (:mod:`protocol_py.providers.http.call_ids`), or, when that id breaks the vendor's
id syntax (a call another vendor produced: ``functions.read_file:0`` sent to Anthropic, whose
ids are ``[A-Za-z0-9_-]+``; an id over Chat Completions' 40 characters), a stable id derived
from it: ``<prefix>`` + 26 base32 characters of its SHA-256. Derived ids depend only on the
kernel id, so every turn sends the same bytes (prompt caching keeps working).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Final, NamedTuple

from protocol_py.providers.http.call_ids import replay_ids
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ToolResultBlock,
)

__all__ = ["NOT_EXECUTED", "Repaired", "WireIds", "answer_dangling_calls"]

NOT_EXECUTED: Final = "The tool call was not executed."
"""The text of the error result given to a tool call left unanswered."""


def _not_executed(call_id: str) -> ContentBlock:
    return ContentBlock(
        tool_result=ToolResultBlock(
            tool_use_id=call_id,
            content=[ContentBlock(text=TextBlock(text=NOT_EXECUTED))],
            is_error=True,
        )
    )


def _call_ids(message: Message) -> list[str]:
    return [b.tool_use.id for b in message.content if b.tool_use is not None and b.tool_use.id]


class Repaired(NamedTuple):
    """One message of a repaired history.

    Attributes:
        message: The message to translate.
        source: Its index in the request's ``messages`` (for field paths and cache
            breakpoints), or None for a message the repair inserted.
        changed: The repair changed or inserted it: a translation cache keyed by the
            original's wire image must not serve it.
    """

    message: Message
    source: int | None
    changed: bool


def answer_dangling_calls(messages: Sequence[Message]) -> list[Repaired]:
    """The history with every tool call answered in the message right after it.

    For each assistant message holding tool calls: when the next message is a user message,
    the calls it does not answer get a :data:`NOT_EXECUTED` error result, placed with the
    others before its first non-result block (results come first, in call order); when the
    next message is another assistant message, a user message holding those results is
    inserted between them. A trailing assistant message (the last of the request) is left as
    it is: its calls are still to be answered.

    Returns:
        The messages in order (the originals where nothing changed, new messages otherwise).
    """
    out: list[Repaired] = []
    pending: list[str] = []
    for i, message in enumerate(messages):
        if pending and message.role == Role.USER:
            answered = {
                b.tool_result.tool_use_id for b in message.content if b.tool_result is not None
            }
            missing = [call_id for call_id in pending if call_id not in answered]
            if missing:
                results = [b for b in message.content if b.tool_result is not None]
                others = [b for b in message.content if b.tool_result is None]
                synthetic = [_not_executed(call_id) for call_id in missing]
                repaired = Message(
                    role=message.role,
                    content=[*results, *synthetic, *others],
                    id=message.id,
                    produced_by_model_id=message.produced_by_model_id,
                    produced_by_provider=message.produced_by_provider,
                )
                out.append(Repaired(repaired, i, True))
            else:
                out.append(Repaired(message, i, False))
        elif pending and message.role == Role.ASSISTANT:
            inserted = Message(
                role=Role.USER, content=[_not_executed(call_id) for call_id in pending], id=""
            )
            out.append(Repaired(inserted, None, True))
            out.append(Repaired(message, i, False))
        else:
            out.append(Repaired(message, i, False))
        pending = _call_ids(message) if message.role == Role.ASSISTANT else []
    return out


def _derived(prefix: str, kernel_id: str) -> str:
    digest = hashlib.sha256(kernel_id.encode("utf-8")).digest()
    return prefix + base64.b32encode(digest).decode("ascii")[:26]


class WireIds:
    """The id to send for a kernel tool-call id (see the module docstring): ``ids(kernel_id)``.

    Args:
        messages: The request's history.
        location: The VendorData location where this vendor family keeps its own ids.
        prefix: The prefix of derived ids (``toolu_``, ``call_``).
        valid: Whether the vendor accepts an id as it is.
    """

    __slots__ = ("_mapping", "_prefix", "_valid")

    def __init__(
        self,
        messages: Sequence[Message],
        *,
        location: str,
        prefix: str,
        valid: Callable[[str], bool],
    ) -> None:
        self._prefix = prefix
        self._valid = valid
        self._mapping: dict[str, str] = dict(replay_ids(messages, location))

    def __call__(self, kernel_id: str) -> str:
        """The wire id of ``kernel_id`` (a tool_use id, or the id a tool_result answers)."""
        wire = self._mapping.get(kernel_id, kernel_id)
        return wire if self._valid(wire) else _derived(self._prefix, kernel_id)

    @property
    def mapping(self) -> Mapping[str, str]:
        """The vendor's own ids kept for replay, by kernel id."""
        return self._mapping
