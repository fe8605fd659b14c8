"""A client's ``grpc-timeout`` header never shortens its deadline (grpclib 0.4).

grpclib writes a timeout over 10 s as whole seconds, rounded down (``encode_timeout``: 10.9 s
becomes ``10S``), so the server's deadline passed up to a second before the client's: the call
ended with the server's DEADLINE_EXCEEDED status (``GRPCError``) instead of the client's own
``asyncio.TimeoutError``, and a kernel's 120 s turn lost up to a second. :func:`encode_timeout`
writes the finest unit whose value, rounded up, fits the 8 digits gRPC allows (``TimeoutValue``,
https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md): nanoseconds up to 0.1 s,
microseconds up to 100 s, milliseconds up to about 27.7 hours, then seconds, minutes and hours
(as grpc-go's ``EncodeDuration``). Rounding up lets the server's deadline fall at most one unit
after the client's, never before.

Installed by :func:`protocol_py._compat.install` (client and server start), once per process,
and only when grpclib still has the shape it was written for (``grpclib.client.encode_timeout``
is the module-level function ``Stream.send_request`` calls); otherwise nothing changes. Checked
on grpclib 0.4.9 (the pinned range is ``>=0.4.9,<0.5``).
"""

from __future__ import annotations

import math
from typing import Any, Final

import grpclib.client as _client

__all__ = ["MAX_TIMEOUT_VALUE", "encode_timeout", "install"]

MAX_TIMEOUT_VALUE: Final = 99_999_999
"""The largest ``TimeoutValue`` gRPC allows: 8 ASCII digits."""

_UNITS: Final = (
    ("n", 1e-9),
    ("u", 1e-6),
    ("m", 1e-3),
    ("S", 1.0),
    ("M", 60.0),
    ("H", 3600.0),
)


def encode_timeout(timeout: float) -> str:
    """The ``grpc-timeout`` value of ``timeout`` seconds: the finest unit whose value, rounded
    up, has at most 8 digits (at least 1; past 99,999,999 hours, that many hours)."""
    for unit, seconds in _UNITS:
        value = max(1, math.ceil(timeout / seconds))
        if value <= MAX_TIMEOUT_VALUE:
            return f"{value}{unit}"
    return f"{MAX_TIMEOUT_VALUE}H"


def install() -> bool:
    """Make grpclib's client write :func:`encode_timeout` (idempotent).

    Returns:
        True when installed (now or before); False when grpclib's shape differs (then nothing
        is changed).
    """
    module: Any = _client
    current = getattr(module, "encode_timeout", None)
    if current is encode_timeout:
        return True
    if not callable(current) or getattr(current, "__module__", "") != "grpclib.metadata":
        return False
    module.encode_timeout = encode_timeout
    return True
