"""``google.protobuf.Duration`` held as a ``datetime.timedelta``: exact, negative ones included.

betterproto2 holds a Duration field as a ``timedelta``. Its conversion of a negative one gives
the nanoseconds the wrong sign: ``timedelta(seconds=-1.5)`` became ``seconds: -1, nanos:
500000000``, which every other runtime reads as -0.5 s (and Go's ``CheckValid`` refuses: the two
must share a sign), and its JSON gave ``"-0.000001s"`` as ``"0.999999s"`` and refused every
negative duration string. The protocol's codec converts them here instead
(https://protobuf.dev/reference/protobuf/google.protobuf/#duration):

* :func:`split`: the ``(seconds, nanos)`` of a timedelta, exact (from its whole microseconds),
  both with the timedelta's sign; :func:`encode` its wire encoding.
* :func:`to_json`: ``"-1.500s"``, the seconds with 0, 3, 6 or 9 fractional digits, as protobuf
  writes it; :func:`from_json` reads any such string (up to 9 fractional digits, the
  nanoseconds beyond whole microseconds dropped toward zero, as protobuf's Python
  ``ToTimedelta`` does) within Duration's range, +-315,576,000,000 s.

Decoding the wire encoding stays betterproto2's (``seconds`` plus ``nanos``, each with its own
sign, is the value whichever sign the sender gave them).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Final

from protocol_py.codec.wire_gen import varint_bytes

__all__ = ["MAX_SECONDS", "encode", "from_json", "split", "to_json"]

MAX_SECONDS: Final = 315_576_000_000
"""Largest magnitude of a Duration, seconds (about 10,000 years), as protobuf defines it."""

_ONE_US: Final = timedelta(microseconds=1)
_JSON: Final = re.compile(r"(-?)([0-9]{1,12})(?:\.([0-9]{1,9}))?s")


def split(delta: timedelta) -> tuple[int, int]:
    """``(seconds, nanos)`` of ``delta``, both with its sign (nanos within +-999,999,000).

    Raises:
        TypeError: ``delta`` is not a timedelta.
    """
    total_us = delta // _ONE_US  # exact: a timedelta is a whole number of microseconds
    whole, us = divmod(abs(total_us), 1_000_000)
    sign = -1 if total_us < 0 else 1
    return sign * whole, sign * us * 1000


def encode(delta: timedelta) -> bytes:
    """The wire encoding of ``delta`` as a Duration message (fields at zero left out).

    Raises:
        TypeError: ``delta`` is not a timedelta.
    """
    if not isinstance(delta, timedelta):
        raise TypeError(f"a Duration field holds a timedelta, not {type(delta).__name__}")
    seconds, nanos = split(delta)
    out = b""
    if seconds:
        out += b"\x08" + varint_bytes(seconds)
    if nanos:
        out += b"\x10" + varint_bytes(nanos)
    return out


def to_json(delta: timedelta) -> str:
    """The proto3-JSON string of ``delta``: ``"3s"``, ``"-1.500s"``, ``"0.000020s"``.

    Raises:
        TypeError: ``delta`` is not a timedelta.
    """
    seconds, nanos = split(delta)
    sign = "-" if seconds < 0 or nanos < 0 else ""
    seconds, nanos = abs(seconds), abs(nanos)
    if nanos == 0:
        return f"{sign}{seconds}s"
    fraction = f"{nanos:09d}"
    for digits in (3, 6):
        if fraction[digits:] == "0" * (9 - digits):
            fraction = fraction[:digits]
            break
    return f"{sign}{seconds}.{fraction}s"


def from_json(text: str) -> timedelta:
    """The timedelta of a proto3-JSON duration string (``"1.5s"``, ``"-0.000001s"``).

    Raises:
        ValueError: ``text`` is not such a string (the message quotes at most its first 40
            characters), or its magnitude is over :data:`MAX_SECONDS`.
    """
    found = _JSON.fullmatch(text) if isinstance(text, str) and len(text) <= 24 else None
    if found is None:
        shown = text[:40] + "..." if isinstance(text, str) and len(text) > 40 else text
        raise ValueError(
            f"invalid duration string {shown!r}: expected seconds with up to 9 fractional "
            'digits and an "s", such as "1.5s" or "-0.000001s"'
        )
    sign, whole, fraction = found.groups()
    seconds = int(whole)
    nanos = int((fraction or "").ljust(9, "0"))
    if seconds > MAX_SECONDS or (seconds == MAX_SECONDS and nanos):
        raise ValueError(f"duration {text!r} is out of range: at most {MAX_SECONDS} seconds")
    delta = timedelta(seconds=seconds, microseconds=nanos // 1000)
    return -delta if sign else delta
