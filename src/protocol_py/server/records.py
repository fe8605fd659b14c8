"""The per-RPC log record: one JSON object per RPC on the ``protocol_py.server`` logger."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Final

from protocol_py.bounded_text import MAX_ECHOED_VALUE_CHARS, bounded_message, quote_value

log = logging.getLogger("protocol_py.server")


@dataclass(slots=True)
class RpcRecord:
    """What one RPC did, logged once as a JSON object by :meth:`emit` (fields left None are
    omitted): rpc, session_id, turn_id, model, duration_s (seconds), events, stop, error_kind,
    outcome (``ok``, ``error``, ``invalid_request``, ``cancelled``, ``deadline_exceeded``),
    detail and config_keys (Configure's top-level keys, never their values). Caller text is
    capped (:mod:`protocol_py.bounded_text`): ids and keys to ``MAX_ECHOED_VALUE_CHARS``
    characters, ``detail`` to ``MAX_ERROR_MESSAGE_BYTES``, at most
    :data:`MAX_LOGGED_CONFIG_KEYS` keys (then ``config_keys_total`` counts them all)."""

    rpc: str
    started: float = field(default_factory=time.monotonic)
    session_id: str | None = None
    turn_id: str | None = None
    model: str | None = None
    events: int | None = None
    stop: str | None = None
    error_kind: str | None = None
    outcome: str = "ok"
    detail: str | None = None
    config_keys: list[str] | None = None

    def emit(self) -> None:
        """Log the record at INFO on ``protocol_py.server`` as one JSON object. A
        ``deadline_exceeded`` outcome always carries ``"error_kind": "DEADLINE_EXCEEDED"``
        (the status sent), whichever path ended the call (deadline, receive timeout)."""
        if self.outcome == "deadline_exceeded" and self.error_kind is None:
            self.error_kind = "DEADLINE_EXCEEDED"
        keys = self.config_keys
        line = {
            "rpc": self.rpc,
            "session_id": _logged(self.session_id),
            "turn_id": _logged(self.turn_id),
            "model": _logged(self.model),
            "duration_s": round(time.monotonic() - self.started, 6),
            "events": self.events,
            "stop": self.stop,
            "error_kind": self.error_kind,
            "outcome": self.outcome,
            "detail": bounded_message(self.detail) if self.detail is not None else None,
            "config_keys": (
                [_logged(k) for k in keys[:MAX_LOGGED_CONFIG_KEYS]] if keys is not None else None
            ),
            "config_keys_total": (
                len(keys) if keys is not None and len(keys) > MAX_LOGGED_CONFIG_KEYS else None
            ),
        }
        log.info(
            json.dumps({k: v for k, v in line.items() if v is not None}, sort_keys=False),
            extra={RPC_RECORD_ATTR: True},
        )


MAX_LOGGED_CONFIG_KEYS: Final = 32
"""Most Configure keys named in one log record (``config_keys``); when there are more,
``config_keys_total`` gives the full count."""


def _logged(text: str | None) -> str | None:
    """Caller text in a log record: unchanged up to ``MAX_ECHOED_VALUE_CHARS`` characters,
    else cut with a marker and its length (:func:`~protocol_py.bounded_text.quote_value`)."""
    if text is None or len(text) <= MAX_ECHOED_VALUE_CHARS:
        return text
    return quote_value(text)


RPC_RECORD_ATTR: Final = "protocol_py_rpc"
"""LogRecord attribute set on the per-RPC JSON records of the ``protocol_py.server`` logger."""


class LogFormatter(logging.Formatter):
    """The ``serve`` log format: a per-RPC record is its JSON object alone (one line, nothing
    before it, so each line parses as JSON); every other record is
    ``<YYYY-MM-DD HH:MM:SS,mmm> <LEVEL> <logger> <message>``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """The JSON object for a per-RPC record, else the text line."""
        if getattr(record, RPC_RECORD_ATTR, False):
            return record.getMessage()
        return super().format(record)
