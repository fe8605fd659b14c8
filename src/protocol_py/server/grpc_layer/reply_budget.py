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
* A reply is counted only once it is encoded, since its size is not known before: until the
  budget refuses it, a reply being built holds the provider's response (one copy) and, while
  it is encoded, its encoding (a second copy). The reference provider builds large texts in at
  most ``protocol_py.server.offload.MAX_CPU_JOBS`` worker threads (2 when measured), but
  finished texts wait for the event loop, so in the attack about 5 replies were being built or
  refused at the peak:
  peak RSS 588-590 MiB over a 50 MiB baseline = 240 MiB held (2 replies, counted) + about
  300 MiB of replies being built and refused (not counted). The bound on memory is therefore
  :data:`REPLY_BUDGET_BYTES` plus the replies in the making, each at most 2 x its size
  (at most ``DEFAULT_MAX_MESSAGE_SIZE``).

The reply budget is a share of the server's one memory budget
(:mod:`protocol_py.server.grpc_layer.memory_budget`, docs/decisions.md#d32), not a second
budget: a held large reply is charged to both, and is refused when either has no room
(replies never take more than :data:`REPLY_BUDGET_BYTES` of it, so requests keep the rest).
"""

from __future__ import annotations

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
        size = HELD_COPIES * len(reply.data)
        if self.held and self.held + size > self.limit:
            encoded = len(reply.data)
            del reply
            raise GRPCError(
                Status.RESOURCE_EXHAUSTED,
                f"reply of {encoded} bytes: the server already holds {self.held} bytes for large "
                f"replies not yet read by their clients, and its reply budget is {self.limit} "
                "bytes; retry later",
            )
        memory = self.memory
        if memory is not None and not memory.fits(size):
            encoded = len(reply.data)
            del reply
            raise memory.refusal(f"reply of {encoded} bytes")
        self.held += size
        if memory is not None:
            memory.take(size)
        try:
            await stream.send_message(reply)
        finally:
            self.held -= size
            if memory is not None:
                memory.give(size)
