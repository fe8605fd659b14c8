"""Tool-call ids that are unique within a conversation, and the vendor ids they stand for.

``ToolUseBlock.id`` MUST be unique within the conversation (content.v1), but vendors do not
guarantee it: some servers number calls per turn (``read_file:0`` again in the next turn), some
send no id at all, and some send one id for two different calls of one response. An adapter
therefore never passes a vendor id to the kernel unchecked. For each call of a response it asks
:class:`CallIds` for the id the kernel sees:

- a vendor id that is non-empty and collides with no id of the request's history (every
  ``tool_use.id`` and ``tool_result.tool_use_id`` of its messages) and no id already issued for
  this response is kept as is (the usual case: the kernel id IS the vendor id);
- otherwise a fresh id is issued: ``<prefix><ULID>`` (``call_01J...``, ``toolu_01J...``;
  python-ulid, 80 random bits per millisecond, checked against the taken ids anyway). Never a
  per-stream counter: a counter restarts with every response and collides across turns.

When the vendor's id was replaced, the adapter keeps it on the call as ``VendorData`` at its own
location (:data:`OPENAI_TOOL_CALL_ID`, :data:`ANTHROPIC_TOOL_USE_ID`) so that it can send the
vendor its own id back on replay (:func:`replay_ids`): the vendor then sees the history it
produced, its tool results included. It is kept only when it is unambiguous inside its message:
an id that collides with another call of the SAME response (two calls under one id) is not kept,
and the fresh id is what that vendor sees for the second call too. Another vendor's adapter
ignores the entry (VendorData rule: unknown locations are ignored) and sends the kernel id.

The Gemini adapters (prefix ``gemini_``) differ in one way: Gemini 2.x sends no ids and
accepts none it did not make on Vertex, so they never send a kernel id back. They record the
vendor id (``gemini.function_call.id``) whenever it is unambiguous, also when it IS the kernel
id (``IssuedId.id == vendor_id``), and send back only recorded ids.

Public API (small on purpose, shared by every adapter family): :class:`CallIds`
(:meth:`CallIds.from_request`, :meth:`CallIds.issue`), :func:`replay_ids`, the location
constants.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, NamedTuple

from ulid import ULID

from protocol_py_gen.content.v1 import Message, VendorData
from protocol_py_gen.model.v1 import StreamCompletionRequest

__all__ = [
    "ANTHROPIC_TOOL_USE_ID",
    "OPENAI_TOOL_CALL_ID",
    "CallIds",
    "IssuedId",
    "history_ids",
    "replay_ids",
]

OPENAI_TOOL_CALL_ID: Final = "openai.tool_call.id"
"""VendorData location of the ``id`` an OpenAI-compatible ``tool_calls[]`` entry arrived with,
kept when the kernel id differs from it (value: the id's UTF-8 bytes)."""

ANTHROPIC_TOOL_USE_ID: Final = "anthropic.tool_use.id"
"""VendorData location of the ``id`` of an Anthropic ``tool_use`` block, kept when the kernel
id differs from it (value: the id's UTF-8 bytes)."""

MAX_ISSUE_ATTEMPTS: Final = 8
"""Fresh ids drawn before giving up on one that is not taken (a collision of 80 random bits is
not expected even once)."""


class IssuedId(NamedTuple):
    """The id the kernel sees for one call, and the vendor id to keep for replay (or None).

    Attributes:
        id: The kernel id: unique within the conversation and this response.
        vendor_id: The vendor's own id when it differs from ``id`` and is unambiguous within
            its response (keep it as VendorData for replay); None when ``id`` is the vendor id
            or the vendor sent none or an ambiguous one.
    """

    id: str
    vendor_id: str | None


def history_ids(messages: Iterable[Message]) -> set[str]:
    """Every tool-call id a conversation already uses: each ``tool_use.id`` and each
    ``tool_result.tool_use_id`` (a result may outlive its call when history was trimmed)."""
    taken: set[str] = set()
    for message in messages:
        for block in message.content:
            use = block.tool_use
            if use is not None:
                if use.id:
                    taken.add(use.id)
                continue
            result = block.tool_result
            if result is not None and result.tool_use_id:
                taken.add(result.tool_use_id)
    return taken


class CallIds:
    """Issues the kernel ids of one response's tool calls (see the module docstring).

    Args:
        taken: Ids of the conversation's history (:func:`history_ids`).
        prefix: The prefix of fresh ids (``call_`` for OpenAI-compatible vendors, ``toolu_``
            for Anthropic, ``gemini_`` for Gemini and Vertex AI), so a fresh id has the shape
            the vendor's own ids have.
    """

    __slots__ = ("_history", "_issued", "_messages", "_prefix", "_vendor_seen")

    def __init__(self, taken: Iterable[str] = (), *, prefix: str = "call_") -> None:
        self._history: set[str] | None = set(taken)
        self._messages: Sequence[Message] = ()
        self._issued: set[str] = set()
        self._vendor_seen: set[str] = set()
        self._prefix = prefix

    @classmethod
    def from_request(
        cls, request: StreamCompletionRequest | None, *, prefix: str = "call_"
    ) -> CallIds:
        """The issuer for a response to ``request`` (None: a response without history). The
        history is read when the first call is issued (a response without tool calls never
        walks it)."""
        ids = cls(prefix=prefix)
        if request is not None:
            ids._history = None
            ids._messages = request.messages
        return ids

    @property
    def _taken(self) -> set[str]:
        if self._history is None:
            self._history = history_ids(self._messages)
            self._messages = ()
        return self._history

    def issue(self, vendor_id: str | None) -> IssuedId:
        """The kernel id of the next call of this response, whose vendor id is ``vendor_id``.

        Call it once per call (a continuation of a call already issued keeps that call's id).

        Returns:
            ``IssuedId(vendor_id, None)`` when the vendor id is non-empty and free; else a fresh
            id, with ``vendor_id`` kept when it collided only with the history.

        Raises:
            RuntimeError: no free fresh id after :data:`MAX_ISSUE_ATTEMPTS` draws (not expected).
        """
        if vendor_id:
            same_response = vendor_id in self._vendor_seen or vendor_id in self._issued
            self._vendor_seen.add(vendor_id)
            if not same_response and vendor_id not in self._taken:
                self._issued.add(vendor_id)
                return IssuedId(vendor_id, None)
            fresh = self._fresh()
            return IssuedId(fresh, None if same_response else vendor_id)
        return IssuedId(self._fresh(), None)

    def _fresh(self) -> str:
        for _ in range(MAX_ISSUE_ATTEMPTS):
            candidate = f"{self._prefix}{ULID()}"
            if (
                candidate not in self._taken
                and candidate not in self._issued
                and candidate not in self._vendor_seen
            ):
                self._issued.add(candidate)
                return candidate
        raise RuntimeError("no free tool-call id")  # pragma: no cover - 80 random bits


def vendor_id_entry(location: str, vendor_id: str) -> VendorData:
    """The VendorData entry that keeps a replaced vendor id (the id's UTF-8 bytes)."""
    return VendorData(location=location, value=vendor_id.encode("utf-8"))


def replay_ids(messages: Sequence[Message], location: str) -> Mapping[str, str]:
    """Kernel id -> the id to send the vendor, for the tool calls of ``messages`` that carry a
    vendor id at ``location`` (calls without one are sent under their kernel id).

    Use the mapping for ``tool_use`` ids and for the ``tool_use_id`` of the results answering
    them. An entry whose value is not UTF-8 text, or is empty, is ignored.
    """
    mapping: dict[str, str] = {}
    for message in messages:
        for block in message.content:
            use = block.tool_use
            if use is None or not use.vendor_data:
                continue
            for entry in use.vendor_data:
                if entry.location != location or not entry.value:
                    continue
                with contextlib.suppress(UnicodeDecodeError):
                    mapping[use.id] = bytes(entry.value).decode("utf-8")
                break
    return mapping
