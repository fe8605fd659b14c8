"""Replay rules a kernel applies between turns (protocol 1.1: paused turns).

A completion that ends with ``Stop{reason: STOP_REASON_PAUSE_TURN}`` (Anthropic's
``pause_turn``: a long server-tool turn paused by the vendor) is not a finished turn. The kernel
continues it by sending the paused assistant message back unmodified as the last message of the
next request, with nothing after it; the plugin then continues the same turn (proto comment of
``StopReason.STOP_REASON_PAUSE_TURN``). :func:`continue_paused_turn` builds that request.
"""

from __future__ import annotations

from protocol_py.errors import InvalidValueError
from protocol_py_gen.content.v1 import Message, Role
from protocol_py_gen.model.v1 import Stop, StopReason, StreamCompletionRequest

__all__ = ["continue_paused_turn", "is_paused"]


def is_paused(stop: Stop | None) -> bool:
    """True when ``stop`` says the vendor paused the turn (STOP_REASON_PAUSE_TURN)."""
    return stop is not None and stop.reason == StopReason.PAUSE_TURN


def continue_paused_turn(
    request: StreamCompletionRequest, paused: Message, stop: Stop | None
) -> StreamCompletionRequest:
    """The request that continues a paused turn.

    Args:
        request: The request whose completion paused.
        paused: The accumulated assistant message of that completion (for example
            ``Completion.message`` or ``AccumulatedResponse.message``), sent back as is.
        stop: That completion's stop event.

    Returns:
        A copy of ``request`` (the original is not modified) with a copy of ``paused``
        appended as its last message; every other field is unchanged.

    Raises:
        InvalidValueError: ``stop`` is not PAUSE_TURN (rule ``replay.not_paused``: only a paused
            turn is continued this way), or ``paused`` is not a ROLE_ASSISTANT message with
            content (rule ``replay.paused_message``).
    """
    if not is_paused(stop):
        reason = "none" if stop is None else getattr(stop.reason, "name", str(stop.reason))
        raise InvalidValueError(
            f"stop: reason {reason} is not PAUSE_TURN; only a paused turn is continued "
            "(rule replay.not_paused)",
            path="stop.reason",
            rule="replay.not_paused",
        )
    if not isinstance(paused, Message) or paused.role != Role.ASSISTANT or not paused.content:
        raise InvalidValueError(
            "paused: expected the paused ROLE_ASSISTANT message with its content "
            "(rule replay.paused_message)",
            path="paused",
            rule="replay.paused_message",
        )
    continued = StreamCompletionRequest.parse(bytes(request))
    continued.messages.append(Message.parse(bytes(paused)))
    return continued
