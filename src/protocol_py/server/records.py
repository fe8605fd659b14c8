"""The per-RPC log record: one JSON object per RPC on the ``protocol_py.server`` logger."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from protocol_py.bounded_text import (
    MAX_ECHOED_VALUE_CHARS,
    MAX_LISTED_ITEM_CHARS,
    bounded_message,
    quote_value,
)
from protocol_py.log_window import LogWindow

log = logging.getLogger("protocol_py.server")


@dataclass(slots=True)
class RpcRecord:
    """What one RPC did, logged once as a JSON object by :meth:`emit` (fields left None are
    omitted): rpc, session_id, turn_id, model, duration_s (seconds), events, stop, error_kind,
    outcome (``ok``, ``error``, ``invalid_request``, ``cancelled``, ``deadline_exceeded``),
    detail and config_keys (Configure's top-level keys, never their values). Caller text is
    capped (:mod:`protocol_py.bounded_text`): ids and keys to ``MAX_ECHOED_VALUE_CHARS``
    characters, ``detail`` to ``MAX_ERROR_MESSAGE_BYTES``, at most
    :data:`MAX_LOGGED_CONFIG_KEYS` keys (then ``config_keys_total`` counts them all), the
    whole line to :data:`MAX_LOG_LINE_BYTES` bytes."""

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
    config_keys_count: int | None = None
    """How many top-level keys the config had, when ``config_keys`` holds only the first
    :data:`MAX_LOGGED_CONFIG_KEYS` of them (None: ``config_keys`` is the whole list)."""

    def emit(self) -> None:
        """Log the record at INFO on ``protocol_py.server`` as one JSON object. A
        ``deadline_exceeded`` outcome always carries ``"error_kind": "DEADLINE_EXCEEDED"``
        (the status sent), whichever path ended the call (deadline, receive timeout)."""
        if self.outcome == "deadline_exceeded" and self.error_kind is None:
            self.error_kind = "DEADLINE_EXCEEDED"
        keys = self.config_keys
        line: dict[str, Any] = {
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
            "config_keys_total": _keys_total(keys, self.config_keys_count),
        }
        log.info(
            _bounded_line(line, keys),
            extra={RPC_RECORD_ATTR: True, RPC_OUTCOME_ATTR: self.outcome},
        )


MAX_LOG_LINE_BYTES: Final = 4096
"""Largest per-RPC JSON log line, in bytes of its UTF-8 encoding. The line is written with
non-ASCII characters as themselves (not 6-byte ``\\u00e9`` escapes); one still longer (long
non-ASCII Configure keys) names fewer ``config_keys`` (``config_keys_total`` counts them all),
then cuts ``detail`` to :data:`MAX_LISTED_ITEM_CHARS` bytes (percent-encoded, as a status)."""


def _dumps(line: dict[str, Any]) -> str:
    text = json.dumps({k: v for k, v in line.items() if v is not None}, ensure_ascii=False)
    return text if text.isprintable() else "".join(map(_shown, text))


def _shown(char: str) -> str:
    """``char`` of a JSON text as written to the log: itself when Python prints it, else its
    JSON escape (``\\u2028``; a pair of surrogates above U+FFFF), so caller text holding line
    or paragraph separators, bidi overrides or other invisible characters cannot split a
    record's line or disguise it, and the record parses to the same values."""
    if char.isprintable():
        return char
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def _bounded_line(line: dict[str, Any], keys: list[str] | None) -> str:
    """The JSON text of ``line``, at most :data:`MAX_LOG_LINE_BYTES` bytes (UTF-8)."""
    text = _dumps(line)
    while len(text.encode()) > MAX_LOG_LINE_BYTES and line["config_keys"]:
        line["config_keys"] = line["config_keys"][: len(line["config_keys"]) // 2]
        line["config_keys_total"] = len(keys or ())
        text = _dumps(line)
    if len(text.encode()) > MAX_LOG_LINE_BYTES and line["detail"] is not None:
        line["detail"] = bounded_message(line["detail"], MAX_LISTED_ITEM_CHARS)
        text = _dumps(line)
    return text


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


RPC_OUTCOME_ATTR: Final = "protocol_py_rpc_outcome"
"""LogRecord attribute holding a per-RPC record's ``outcome`` (read by :class:`RecordLimit`)."""

RPC_RECORD_BURST: Final = 200
"""Most per-RPC records of calls that did not end ``ok`` written in one
:data:`RPC_RECORD_INTERVAL` window (:class:`RecordLimit`)."""

RPC_RECORD_INTERVAL: Final = 1.0
"""The window of :data:`RPC_RECORD_BURST`, in seconds."""


class RecordLimit(logging.Filter):
    """A log filter bounding the per-RPC records of calls that did not end ``ok`` (cancelled,
    refused, invalid, failed, past their deadline): at most ``burst`` of them per ``interval``
    seconds, in fixed windows starting at the first such record, so a client resetting streams
    as fast as it can (reconnecting after each GOAWAY) cannot flood the log. Records of calls
    that ended ``ok`` and every other log record always pass.

    The records past the bound are counted by outcome; when their window ends one summary
    record is written (a JSON object on its own line, like the per-RPC ones, with no ``rpc``
    key): ``{"records_suppressed": N, "outcomes": {"cancelled": N}, "interval_s": 1.0}``.
    ``protocol-py serve`` installs it on its log handler (:func:`protocol_py.server.serve.\
configure_logging`); an application with its own logging may add it to its handler.

    Args:
        burst: Records of calls not ended ``ok`` written per window (default
            :data:`RPC_RECORD_BURST`).
        interval: The window, seconds (default :data:`RPC_RECORD_INTERVAL`).
        clock: Monotonic time, seconds (tests pass their own).
    """

    def __init__(
        self,
        burst: int = RPC_RECORD_BURST,
        interval: float = RPC_RECORD_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._window = LogWindow(burst, interval, self._write_summary, clock)
        self.suppressed: dict[str, int] = {}
        """Records not written in the current window, by outcome."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a per-RPC record of a call not ended ``ok`` past the window's bound (it
        is counted), else True."""
        outcome = getattr(record, RPC_OUTCOME_ATTR, None)
        if outcome is None or outcome == "ok" or not getattr(record, RPC_RECORD_ATTR, False):
            return True
        if self._window.admit():
            return True
        self.suppressed[outcome] = self.suppressed.get(outcome, 0) + 1
        return False

    def flush(self) -> None:
        """Write the summary record of the records suppressed so far, if any."""
        self._window.flush()

    def _write_summary(self) -> None:
        if not self.suppressed:
            return
        summary = {
            "records_suppressed": sum(self.suppressed.values()),
            "outcomes": dict(sorted(self.suppressed.items())),
            "interval_s": self._window.interval,
        }
        self.suppressed = {}
        log.info(json.dumps(summary), extra={RPC_RECORD_ATTR: True})


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


def _keys_total(keys: list[str] | None, count: int | None) -> int | None:
    """``config_keys_total``: the number of keys when more than are logged, else None."""
    if keys is None:
        return None
    total = len(keys) if count is None else count
    return total if total > MAX_LOGGED_CONFIG_KEYS else None
