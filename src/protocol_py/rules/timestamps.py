"""ISO 8601 / RFC 3339 timestamps of a Pricing's tier bounds (spec: "Pricing";
docs/decisions.md#d9).

:func:`parse_timestamp` reads a date (00:00 UTC of that day) or a date-time with ``Z`` or an
offset into an aware UTC :class:`datetime.datetime`; a date-time without an offset is refused,
never read as local time. Fraction digits beyond microseconds are truncated
(``testdata/cases/C14.json``). The result is the same on every supported Python version.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

from protocol_py.errors import InvalidValueError

__all__ = ["parse_timestamp"]

_DATE_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_DATETIME_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?"
    r"(?:(?P<z>[Zz])|(?P<sign>[+-])(?P<oh>\d{2})(?::?(?P<om>\d{2}))?)?",
    re.ASCII,
)


def parse_timestamp(value: str, *, path: str = "") -> datetime:
    """Parse an ISO 8601 / RFC 3339 date or date-time into an aware UTC datetime
    (docs/decisions.md#d9).

    Accepted forms, exactly (ISO 8601 extended format, a superset of RFC 3339): a date
    ``YYYY-MM-DD`` (meaning 00:00 UTC of that day) or a date-time
    ``YYYY-MM-DD(T|t|space)HH:MM[:SS[(.|,)fraction]]`` followed by ``Z``/``z`` or an offset
    ``+HH:MM`` / ``+HHMM`` / ``+HH``. The fraction may have any number of digits; digits beyond
    microseconds are truncated, never rounded and never an error (testdata/cases/C14.json).
    Not accepted: surrounding whitespace, the basic format (``20260701T000000Z``), week and
    ordinal dates (``2026-W27-3``, ``2026-182``), an hour without minutes (``2026-07-01T00Z``)
    and hour ``24``. A leap second ``:60`` (RFC 3339) reads as the next second. The result is
    identical on every supported Python version (no use of :meth:`datetime.fromisoformat`).

    Args:
        value: The text.
        path: Field path used in error messages, for example ``pricing.tiers[0].effective_from``.

    Returns:
        A timezone-aware datetime in UTC.

    Raises:
        InvalidValueError: the text is not a date or date-time (rule ``timestamp.unparseable``),
            names an impossible date or time (``timestamp.out_of_range``), or is a date-time
            without an offset (``timestamp.naive``: never read as local time or as UTC).
    """
    where = path or "timestamp"
    if not isinstance(value, str):
        raise InvalidValueError(
            f"{where}: expected an ISO 8601 string, got {type(value).__name__}",
            path=path,
            rule="timestamp.unparseable",
        )
    text = value
    if text != text.strip():
        raise InvalidValueError(
            f"{where}: {value!r} has leading or trailing whitespace; give the timestamp alone",
            path=path,
            rule="timestamp.unparseable",
        )
    try:
        m = _DATE_RE.fullmatch(text)
        if m is not None:
            return datetime(int(m[1]), int(m[2]), int(m[3]), tzinfo=UTC)
        m = _DATETIME_RE.fullmatch(text)
        if m is None:
            raise InvalidValueError(
                f"{where}: {value!r} is not an ISO 8601 date or date-time",
                path=path,
                rule="timestamp.unparseable",
            )
        if m["z"] is None and m["sign"] is None:
            raise InvalidValueError(
                f"{where}: {value!r} is a date-time without a UTC offset; add 'Z' or an offset "
                "such as '+00:00' (naive times are never read as local time)",
                path=path,
                rule="timestamp.naive",
            )
        micro = int(((m[7] or "") + "000000")[:6])
        if m["z"] is not None:
            tz: timezone = UTC
        else:
            oh, om = int(m["oh"]), int(m["om"] or 0)
            if oh > 23 or om > 59:
                raise InvalidValueError(
                    f"{where}: {value!r} has an impossible UTC offset",
                    path=path,
                    rule="timestamp.out_of_range",
                )
            delta = timedelta(hours=oh, minutes=om)
            tz = timezone(-delta if m["sign"] == "-" else delta)
        second = int(m[6] or 0)
        leap = second == 60  # RFC 3339 allows a leap second; fold it onto the next second.
        parsed = datetime(
            int(m[1]),
            int(m[2]),
            int(m[3]),
            int(m[4]),
            int(m[5]),
            59 if leap else second,
            micro,
            tzinfo=tz,
        )
        if leap:
            parsed += timedelta(seconds=1)
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        if isinstance(exc, InvalidValueError):
            raise
        raise InvalidValueError(
            f"{where}: {value!r} is out of range: {exc}", path=path, rule="timestamp.out_of_range"
        ) from None


def _format_time(at: datetime) -> str:
    text = at.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _check_aware(at: object, what: str) -> datetime:
    if not isinstance(at, datetime):
        raise InvalidValueError(
            f"{what}: expected a timezone-aware datetime, got {type(at).__name__}",
            path=what,
            rule="timestamp.not_datetime",
        )
    if at.tzinfo is None or at.utcoffset() is None:
        raise InvalidValueError(
            f"{what}: {at.isoformat()} is a naive datetime; pass a timezone-aware one",
            path=what,
            rule="timestamp.naive",
        )
    return at
