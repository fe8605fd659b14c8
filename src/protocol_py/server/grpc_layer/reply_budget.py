"""A byte budget for the large unary replies the server holds at once, so that clients that
never read their large replies cannot make the server hold them without bound.

A unary reply is encoded before it is sent
(:func:`protocol_py.server.grpc_layer.limits.encode_reply`),
the provider's response object is dropped, and the encoded bytes are held until the client has
taken them (HTTP/2 flow control) or the call ends. Replies of at least
:data:`LARGE_REPLY_BYTES` count against :data:`REPLY_BUDGET_BYTES`; a reply that would exceed
the budget fails at once with RESOURCE_EXHAUSTED (waiting would hold its bytes too, so the
budget would not bound memory). Smaller replies are never refused. One reply larger than the
whole budget is sent when no other large reply is held (the maximum message size bounds it).

What the budget does and does not count (measured with tracemalloc and ``/proc`` RSS, the
attack of 4 clients x 5 unread 60 MiB Render replies, ``tests/reliability/test_reply_budget.py``):

* A held reply is exactly :data:`HELD_COPIES` copies of its encoding (a 60 MiB reply: 120 MiB
  traced, 120 MiB counted); h2 and the socket add at most the peer's flow-control window.
* A reply whose top-level text and bytes fields reach :data:`LARGE_REPLY_BYTES` (a large
  Render) is counted as soon as the provider returns it, before it is encoded
  (:meth:`ReplyBudget.reserve`): by its exact encoded size when its text is ASCII
  (:func:`protocol_py.codec.wire.encoded_size` copies no ASCII text), else by the text's length
  (a lower bound) and then by the exact size found in a worker thread
  (:meth:`Reservation.grow`). It is then encoded in a worker thread, so its encoding never
  holds the event loop (a 60 MiB one held it for 96-140 ms). Not counted are only the replies
  the provider is still building: the reference provider builds large texts in at most
  ``protocol_py.server.offload.MAX_CPU_JOBS`` worker threads (2 when measured). In the attack:
  peak RSS +292-297 MiB over a 55 MiB baseline = 240 MiB held (2 replies, counted) + about
  55 MiB being built. (When a finished reply waited for the event loop to encode it before
  being counted, about 5 replies were being built or refused at the peak: +540 MiB.)
* Any other reply is counted only once it is encoded, on the event loop: until then it holds
  the provider's response (one copy) and, while it is encoded, its encoding (a second copy).
  The bound on memory is therefore :data:`REPLY_BUDGET_BYTES` plus the replies in the making,
  each at most 2 x its size (at most ``DEFAULT_MAX_MESSAGE_SIZE``).

The reply budget is a share of the server's one memory budget
(:mod:`protocol_py.server.grpc_layer.memory_budget`, docs/decisions.md#d32), not a second
budget: a held large reply is charged to both, and is refused when either has no room
(replies never take more than :data:`REPLY_BUDGET_BYTES` of it, so requests keep the rest).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Final

import grpclib.server
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from protocol_py.server.grpc_layer.limits import EncodedReply
from protocol_py.server.grpc_layer.memory_budget import MemoryBudget

__all__ = [
    "HELD_COPIES",
    "LARGE_REPLY_BYTES",
    "REPLY_BUDGET_BYTES",
    "ReplyBudget",
    "Reservation",
]

REPLY_BUDGET_BYTES: Final = 256 * 1024 * 1024
"""Most bytes the server holds at once for large unary replies (256 MiB), each counted
:data:`HELD_COPIES` times its encoded size."""

HELD_COPIES: Final = 2
"""Copies of a reply held while it is sent: the encoded message and grpclib's framed copy
(5-byte prefix + message), both alive until the client has read it."""

LARGE_REPLY_BYTES: Final = 1024 * 1024
"""Encoded unary replies of at least this many bytes (1 MiB) count against
:data:`REPLY_BUDGET_BYTES`; smaller ones are sent without waiting."""


class ReplyBudget:
    """The budget of one server; see the module docstring.

    Args:
        limit: :data:`REPLY_BUDGET_BYTES` unless given, bytes.
        memory: The server's memory budget, charged too (None: only ``limit`` applies).
    """

    def __init__(self, limit: int = REPLY_BUDGET_BYTES, memory: MemoryBudget | None = None) -> None:
        self.limit = limit
        self.memory = memory
        self.held = 0
        """Bytes of large replies held now."""

    def _take(self, encoded: int, *, exact: bool = True) -> int:
        """Count a reply of ``encoded`` bytes (``exact`` False: at least that many) as held;
        the bytes counted (for :meth:`_give`).

        Raises:
            GRPCError: RESOURCE_EXHAUSTED, as :meth:`send` says.
        """
        size = HELD_COPIES * encoded
        what = f"reply of {encoded} bytes" if exact else f"reply of at least {encoded} bytes"
        if self.held and self.held + size > self.limit:
            raise GRPCError(
                Status.RESOURCE_EXHAUSTED,
                f"{what}: the server already holds {self.held} bytes for large "
                f"replies not yet read by their clients, and its reply budget is {self.limit} "
                "bytes; retry later",
            )
        memory = self.memory
        too_large = memory.never_fits(what, size) if memory is not None else None
        if too_large is not None:  # no retry can succeed: said so, not "retry later"
            raise too_large
        if memory is not None and not memory.fits(size):
            raise memory.refusal(what)
        self.held += size
        if memory is not None:
            memory.take(size)
        return size

    def _give(self, size: int) -> None:
        self.held -= size
        if self.memory is not None:
            self.memory.give(size)

    async def send(self, stream: grpclib.server.Stream[Any, Any], box: list[EncodedReply]) -> None:
        """Send the reply taken out of ``box`` (so the caller holds no reference to it),
        counted as held until the client has taken it or the call ends.

        Raises:
            GRPCError: RESOURCE_EXHAUSTED when the budget has no room for the reply's bytes
                (the message states the reply's size, the bytes held and the budget), or the
                server's memory budget has none
                (:class:`~protocol_py.server.grpc_layer.memory_budget.MemoryBudgetError`); the
                reply is freed before the error is raised.
        """
        reply = box.pop()
        if len(reply.data) < LARGE_REPLY_BYTES:
            await stream.send_message(reply)
            return
        try:
            size = self._take(len(reply.data))
        except GRPCError:
            del reply
            raise
        try:
            await stream.send_message(reply)
        finally:
            self._give(size)

    @contextlib.contextmanager
    def reserve(self, encoded: int, *, exact: bool = True) -> Iterator[Reservation]:
        """Count a reply of at least ``encoded`` bytes (a lower bound of its encoded size,
        known before it is encoded) as held for the block, refused at once when it does not
        fit: the block finds the exact size (:meth:`Reservation.grow`), encodes the reply in
        a worker thread and sends it with :meth:`send_reserved`; the bytes are released when
        the block ends (the client has taken the reply, or the call ended). So a reply
        waiting for a worker thread or being encoded there is counted too.

        Args:
            encoded: The reply's encoded size, bytes (``exact`` False: a lower bound of it; a
                refusal then says "reply of at least <encoded> bytes").

        Raises:
            GRPCError: RESOURCE_EXHAUSTED as :meth:`send` says, before the block runs.
        """
        reservation = Reservation(self, self._take(encoded, exact=exact))
        try:
            yield reservation
        finally:
            self._give(reservation.size)

    async def send_reserved(
        self, stream: grpclib.server.Stream[Any, Any], box: list[EncodedReply]
    ) -> None:
        """Send the reply taken out of ``box``, already counted by :meth:`reserve`."""
        reply = box.pop()
        await stream.send_message(reply)


class Reservation:
    """Bytes of one reply counted by :meth:`ReplyBudget.reserve`."""

    def __init__(self, budget: ReplyBudget, size: int) -> None:
        self.budget = budget
        self.size = size
        """Bytes counted now (:data:`HELD_COPIES` x the encoded size)."""

    def grow(self, encoded: int) -> None:
        """Count the reply's exact encoded size (``encoded`` bytes) instead of its lower bound.

        Raises:
            GRPCError: RESOURCE_EXHAUSTED as :meth:`ReplyBudget.send` says, when the rest
                does not fit; what was counted stays counted until the block ends.
        """
        more = encoded - self.size // HELD_COPIES
        if more > 0:
            self.size += self.budget._take(more)
