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
import contextlib
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Final, NamedTuple, cast

from protocol_py.codec import wire
from protocol_py.codec.prefixes import ConversationPrefixes
from protocol_py.providers.http.call_ids import replay_ids
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ToolResultBlock,
)

__all__ = [
    "NOT_EXECUTED",
    "HistoryMemo",
    "Repaired",
    "WireIds",
    "answer_dangling_calls",
    "repaired_history",
]

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


def _needs_repair(messages: Sequence[Message]) -> bool:
    """Whether some tool call is not answered by the message right after it (one pass, the
    common answer being no)."""
    user, assistant = Role.USER, Role.ASSISTANT
    pending: list[str] | None = None
    for message in messages:
        role = message.role
        if pending:
            if role is assistant:
                return True
            if role is user:
                answered = {
                    r.tool_use_id for b in message.content if (r := b.tool_result) is not None
                }
                if not answered.issuperset(pending):
                    return True
        pending = (
            [u.id for b in message.content if (u := b.tool_use) is not None and u.id]
            if role is assistant
            else None
        )
    return False


def answer_dangling_calls(messages: Sequence[Message]) -> list[Repaired] | None:
    """The history with every tool call answered in the message right after it.

    For each assistant message holding tool calls: when the next message is a user message,
    the calls it does not answer get a :data:`NOT_EXECUTED` error result, placed with the
    others before its first non-result block (results come first, in call order); when the
    next message is another assistant message, a user message holding those results is
    inserted between them. A trailing assistant message (the last of the request) is left as
    it is: its calls are still to be answered.

    Returns:
        The messages in order (the originals where nothing changed, new messages otherwise),
        or None when every call is answered already (the history is sent as it is).
    """
    if not _needs_repair(messages):
        return None
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


def repaired_history(messages: Sequence[Message]) -> list[Repaired]:
    """:func:`answer_dangling_calls`, or every message as it is when nothing needs a repair."""
    repaired = answer_dangling_calls(messages)
    if repaired is None:
        return [Repaired(message, i, False) for i, message in enumerate(messages)]
    return repaired


def _derived(prefix: str, kernel_id: str) -> str:
    digest = hashlib.sha256(kernel_id.encode("utf-8")).digest()
    return prefix + base64.b32encode(digest).decode("ascii")[:26]


class _Facts(NamedTuple):
    """What the repairs need to know of a message list, extendable message by message."""

    dangling: bool  # some call is not answered by the message right after it
    pending: tuple[str, ...]  # the calls of the last message, when it is an assistant message
    kept: dict[str, str]  # kernel id -> the vendor's own id kept at the memo's location


def _extend(facts: _Facts, messages: Sequence[Message], location: str) -> _Facts:
    user, assistant = Role.USER, Role.ASSISTANT
    dangling, pending, kept = facts.dangling, facts.pending, facts.kept
    for message in messages:
        role = message.role
        if pending and not dangling:
            if role is assistant:
                dangling = True
            elif role is user:
                answered = {
                    r.tool_use_id for b in message.content if (r := b.tool_result) is not None
                }
                dangling = not answered.issuperset(pending)
        calls: list[str] = []
        if role is assistant:
            for block in message.content:
                use = block.tool_use
                if use is None:
                    continue
                if use.id:
                    calls.append(use.id)
                for entry in use.vendor_data:
                    if entry.location == location and entry.value:
                        with contextlib.suppress(UnicodeDecodeError):
                            kept[use.id] = bytes(entry.value).decode("utf-8")
                        break
        pending = tuple(calls)
    return _Facts(dangling, pending, kept)


MAX_MEMO_LISTS: Final = 64
"""Conversations whose last message list :class:`HistoryMemo` keeps."""

MAX_MEMO_BYTES: Final = 64 * 1024 * 1024
"""Bytes those lists hold (their content keys or wire images, shared with the decode memo's
and the translation cache's)."""


class HistoryMemo:
    """The repairs' view of each conversation's last message list, so that a turn that extends
    it looks only at the new messages (an agent kernel resends the whole conversation every
    turn). Keyed by the VendorData location and the first message's content key (its wire
    image without the id, when the server's decode computed the content keys:
    :class:`protocol_py.codec.wire.MessageImages`; else its id); reused only when the new list
    starts with exactly the kept content keys (else wire images), compared byte for byte
    (:class:`ConversationPrefixes`): the repairs read no message id, so the same conversation
    under new ids (a kernel restarted) is not walked again.
    Bounds: :data:`MAX_MEMO_LISTS` lists, :data:`MAX_MEMO_BYTES` bytes. Thread-safe.
    """

    def __init__(self) -> None:
        self._lists: ConversationPrefixes[_Facts] = ConversationPrefixes(
            MAX_MEMO_LISTS, MAX_MEMO_BYTES
        )

    def plan(
        self,
        messages: Sequence[Message],
        images: Sequence[bytes | None] | None,
        *,
        location: str,
        prefix: str,
        valid: Callable[[str], bool],
    ) -> tuple[list[Repaired] | None, WireIds]:
        """:func:`answer_dangling_calls` and :class:`WireIds` for ``messages``; ``images`` (the
        wire image of each message, as the server decoded them; None: unknown) let the memo
        skip the messages of the conversation's last list."""
        start, facts = 0, _Facts(False, (), {})
        # the repairs read the messages' content, never their ids: with the content keys of
        # the server's decode the same conversation under new message ids still matches
        keys = _content_keys(images, len(messages))
        if keys is not None:
            images = keys
        key: tuple[str, str | bytes] | None = None
        if messages and images is not None:
            key = (location, keys[0] if keys is not None else messages[0].id)
        if images is not None and key is not None:
            found = self._lists.match(key, images)
            if found is not None:
                start, facts = len(found[0]), found[1]
        if start < len(messages):
            facts = _extend(
                _Facts(facts.dangling, facts.pending, dict(facts.kept)), messages[start:], location
            )
            if images is not None and key is not None and None not in images:
                mapped = sum(len(k) + len(v) for k, v in facts.kept.items())
                kept_images = cast("tuple[bytes, ...]", tuple(images))
                self._lists.put(key, kept_images, facts, mapped)
        ids = WireIds((), location=location, prefix=prefix, valid=valid)
        ids._mapping = facts.kept  # read-only from here on
        return (answer_dangling_calls(messages) if facts.dangling else None), ids


def _content_keys(images: Sequence[bytes | None] | None, count: int) -> list[bytes] | None:
    """The content key of each of ``count`` messages (their wire image without the id), when
    the server's decode computed them along with ``images``
    (:class:`protocol_py.codec.wire.MessageImages`), else None."""
    if isinstance(images, wire.MessageImages) and len(images) == count:
        keys = images.content_keys
        if keys is not None and len(keys) == count:
            return keys
    return None


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
