"""The server's TLS accept path: each refused TLS or mutual-TLS handshake is one WARNING line.

asyncio's own TLS server (``create_server(ssl=...)``) swallows a failed handshake: the
exception is an ``OSError``, which asyncio reports only in its debug mode, so an operator saw
nothing of a plaintext client on a TLS port, a client with no certificate or one from another
CA. Here the listener accepts plain TCP (or unix-socket) connections and upgrades each with the
public ``loop.start_tls`` (:class:`TLSAcceptProtocol`), which hands the handshake's failure back
to us. The refusal is logged on ``protocol_py.server`` as one WARNING naming the peer address
and the reason in words (:func:`refusal_reason`: never certificate contents, never caller
bytes), at most :data:`TLS_REFUSAL_LOG_BURST` lines per :data:`TLS_REFUSAL_LOG_INTERVAL`
seconds per server; the refusals past that are counted and summed up in one line when the
interval ends (:class:`RefusalLog`).

The application protocol (grpclib's HTTP/2 protocol) is created when the connection is
accepted, as asyncio's TLS server does, and sees ``connection_made`` only after a completed
handshake, with the TLS transport (``get_extra_info("ssl_object")``, ``"peercert"`` work as
before). The handshake is bounded by the server's handshake timeout.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any, Final, cast

from protocol_py.log_window import LogWindow

log = logging.getLogger("protocol_py.server")

TLS_REFUSAL_LOG_BURST: Final = 10
"""Refused TLS handshakes logged, one WARNING line each, per :data:`TLS_REFUSAL_LOG_INTERVAL`
per server, in lines; the rest are counted and reported in one summary line."""

TLS_REFUSAL_LOG_INTERVAL: Final = 60.0
"""Length of the window over which :data:`TLS_REFUSAL_LOG_BURST` applies, in seconds."""

_ALERTS: Final = {
    # The client sent a TLS alert: it refused our certificate or our offer.
    "TLSV1_ALERT_UNKNOWN_CA": "the client does not trust this server's certificate "
    "(unknown CA alert)",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the client refused this server's certificate "
    "(bad certificate alert)",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "the client refused this server's certificate "
    "(certificate unknown alert)",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the client says this server's certificate has expired",
    "TLSV1_ALERT_DECRYPT_ERROR": "the client could not verify the handshake (decrypt error alert)",
    "TLSV1_ALERT_PROTOCOL_VERSION": "the client does not support TLS 1.2 or newer",
    "TLSV1_ALERT_NO_APPLICATION_PROTOCOL": "the client and server share no ALPN protocol (h2)",
}

_REASONS: Final = {
    "WRONG_VERSION_NUMBER": "client sent plaintext to a TLS port (not a TLS record)",
    "HTTP_REQUEST": "client sent plaintext HTTP to a TLS port",
    "HTTPS_PROXY_REQUEST": "client sent a plaintext proxy CONNECT to a TLS port",
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "no client certificate (mutual TLS requires one)",
    "UNSUPPORTED_PROTOCOL": "the client offered only TLS versions older than 1.2",
    "NO_SHARED_CIPHER": "no cipher suite shared with the client",
    "NO_APPLICATION_PROTOCOL": "the client did not offer ALPN h2 (gRPC needs HTTP/2)",
    "NO_SUITABLE_SIGNATURE_ALGORITHM": "no signature algorithm shared with the client",
    "UNEXPECTED_EOF_WHILE_READING": "the client ended the handshake (it may not trust this "
    "server's certificate)",
}

_VERIFY: Final = {
    # X509 verification codes (OpenSSL's X509_V_ERR_*) of a client certificate.
    2: "client certificate not signed by the trusted CA (issuer unknown)",
    7: "client certificate signature does not verify",
    9: "client certificate not yet valid",
    10: "client certificate expired",
    18: "client certificate is self-signed and not trusted",
    19: "client certificate chain ends in a CA that is not trusted",
    20: "client certificate not signed by the trusted CA",
    21: "client certificate not signed by the trusted CA",
    26: "client certificate not valid for client authentication (extended key usage)",
}


def refusal_reason(exc: BaseException, handshake_timeout: float | None = None) -> str:
    """The reason a server-side TLS handshake failed, in words, from its exception.

    Only OpenSSL's reason code and X509 verification code are read (fixed names from a closed
    set), never the certificate or the peer's bytes; an unknown reason is named by its code,
    cut to 60 characters.

    Args:
        exc: What ``loop.start_tls`` raised.
        handshake_timeout: The handshake timeout, seconds (named when it expired).
    """
    if isinstance(exc, ssl.SSLCertVerificationError):
        code = exc.verify_code
        if code in _VERIFY:
            return _VERIFY[code]
        return f"client certificate not accepted (verification error {int(code or 0)})"
    if isinstance(exc, ssl.SSLError):
        reason = str(exc.reason or "")[:60]
        if reason in _REASONS:
            return _REASONS[reason]
        if reason in _ALERTS:
            return _ALERTS[reason]
        if reason == "CERTIFICATE_VERIFY_FAILED":
            return "client certificate not signed by the trusted CA"
        if reason.endswith("ALERT_CERTIFICATE_REQUIRED"):
            return "no client certificate (mutual TLS requires one)"
        if isinstance(exc, ssl.SSLEOFError) or "EOF" in reason:
            return _REASONS["UNEXPECTED_EOF_WHILE_READING"]
        return f"TLS handshake failed ({reason or type(exc).__name__})"
    if isinstance(exc, ConnectionAbortedError | TimeoutError):
        within = f" within {handshake_timeout:g} s" if handshake_timeout is not None else ""
        return f"no TLS handshake completed{within} (handshake timeout)"
    if isinstance(exc, ConnectionResetError | BrokenPipeError | EOFError):
        return _REASONS["UNEXPECTED_EOF_WHILE_READING"]
    if isinstance(exc, OSError):
        return f"connection failed during the TLS handshake ({exc.strerror or type(exc).__name__})"
    return f"TLS handshake failed ({type(exc).__name__})"


class RefusalLog:
    """Rate-limited WARNING lines for refused handshakes, one instance per server.

    At most :data:`TLS_REFUSAL_LOG_BURST` lines per :data:`TLS_REFUSAL_LOG_INTERVAL` seconds
    (fixed windows, the first starting at the first refusal); each refusal past that is counted,
    and when the window ends one WARNING gives the count (``suppressed N more refused TLS
    handshakes in the last 60 s``).

    Args:
        burst: Lines per window (default :data:`TLS_REFUSAL_LOG_BURST`).
        interval: The window, seconds (default :data:`TLS_REFUSAL_LOG_INTERVAL`).
        clock: Monotonic time, seconds (tests pass their own).
    """

    def __init__(
        self,
        burst: int = TLS_REFUSAL_LOG_BURST,
        interval: float = TLS_REFUSAL_LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window = LogWindow(burst, interval, self._write_summary, clock)
        self.suppressed = 0
        """Refusals not logged in the current window."""
        self.total = 0
        """Refusals seen since this log was made."""

    @property
    def burst(self) -> int:
        """Lines per window."""
        return self._window.burst

    @property
    def interval(self) -> float:
        """The window, seconds."""
        return self._window.interval

    def refused(self, peer: str, reason: str) -> None:
        """Log (or count) one refused handshake from ``peer`` for ``reason``."""
        self.total += 1
        if self._window.admit():
            log.warning("refused a TLS handshake from %s: %s", peer, reason)
        else:
            self.suppressed += 1

    def flush(self) -> None:
        """Write the summary line of the refusals suppressed so far, if any."""
        self._window.flush()

    def _write_summary(self) -> None:
        if self.suppressed:
            log.warning(
                "suppressed %d more refused TLS handshakes in the last %g s (at most %d lines "
                "per %g s)",
                self.suppressed,
                self.interval,
                self.burst,
                self.interval,
            )
            self.suppressed = 0


def peer_name(transport: asyncio.BaseTransport) -> str:
    """``host:port`` of a transport's peer, ``[v6]:port`` for IPv6, or ``a unix socket peer``."""
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        host = str(peer[0])
        return f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"
    return "a unix socket peer"


class _Gate(asyncio.Protocol):
    """What the TLS transport talks to until the application protocol takes over: it keeps
    the bytes decrypted right after the handshake (at most those of the read that completed
    it, before the upgrading task resumes) and an end of file or loss, and hands them on."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.eof = False
        self.lost = False
        self.lost_exc: BaseException | None = None

    def data_received(self, data: bytes) -> None:
        self.data.append(data)

    def eof_received(self) -> bool | None:
        self.eof = True
        return None

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost, self.lost_exc = True, exc


class TLSAcceptProtocol(asyncio.Protocol):
    """A plain accepted connection, upgraded to TLS at once; ``app`` (created at accept) gets
    the TLS transport after a completed handshake, and a refusal goes to ``refusals``.

    Args:
        app: The application protocol (grpclib's HTTP/2 protocol).
        context: The server SSL context.
        handshake_timeout: Seconds the handshake may take.
        refusals: The server's :class:`RefusalLog`.
    """

    def __init__(
        self,
        app: asyncio.Protocol,
        context: ssl.SSLContext,
        handshake_timeout: float,
        refusals: RefusalLog,
    ) -> None:
        self.app = app
        self.context = context
        self.handshake_timeout = handshake_timeout
        self.refusals = refusals
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Stop reading (no byte reaches this protocol) and start the handshake."""
        plain = cast(asyncio.Transport, transport)
        plain.pause_reading()
        self._task = asyncio.get_running_loop().create_task(self._upgrade(plain))

    async def _upgrade(self, plain: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        peer = peer_name(plain)
        gate = _Gate()
        try:
            secure = await loop.start_tls(
                plain,
                gate,
                self.context,
                server_side=True,
                ssl_handshake_timeout=self.handshake_timeout,
            )
        except asyncio.CancelledError:
            plain.abort()
            raise
        except Exception as exc:  # every refusal: one (rate-limited) line, the socket closed
            plain.abort()
            self.refusals.refused(peer, refusal_reason(exc, self.handshake_timeout))
            return
        if secure is None or gate.lost:
            plain.abort()
            return
        app = self.app
        secure.set_protocol(app)
        app.connection_made(secure)
        for data in gate.data:
            if secure.is_closing():
                break
            app.data_received(data)
        gate.data.clear()
        if gate.eof and not secure.is_closing() and not app.eof_received():
            secure.close()

    def data_received(self, data: bytes) -> None:
        """Not called (reading is paused until the TLS protocol takes over)."""

    def connection_lost(self, exc: BaseException | None) -> None:
        """The peer went away before the handshake began: stop it."""
        if self._task is not None and not self._task.done():
            self._task.cancel()


def tls_protocol_factory(
    factory: Callable[[], Any],
    context: ssl.SSLContext,
    handshake_timeout: float,
    refusals: RefusalLog,
) -> Callable[[], TLSAcceptProtocol]:
    """A listener's protocol factory serving TLS with ``context`` through
    :class:`TLSAcceptProtocol` around each protocol ``factory`` makes (pass the result to
    ``create_server``/``create_unix_server`` with ``ssl=None``)."""

    def make() -> TLSAcceptProtocol:
        return TLSAcceptProtocol(factory(), context, handshake_timeout, refusals)

    return make


__all__ = [
    "TLS_REFUSAL_LOG_BURST",
    "TLS_REFUSAL_LOG_INTERVAL",
    "RefusalLog",
    "TLSAcceptProtocol",
    "peer_name",
    "refusal_reason",
    "tls_protocol_factory",
]
