"""What a client's connection failure most likely means, in words, with what to do about it.

A transport mismatch shows up at the client as a bare library error: ``WRONG_VERSION_NUMBER``
(a TLS client talking to a plaintext server), ``Connection lost`` (a plaintext client talking
to a TLS server, or to a launched plugin's socket, which speaks automatic mutual TLS), or
``Connect call failed`` (nothing listening). :func:`connection_hint` maps each to one sentence
naming the likely cause and the fix; ``protocol-py chat``, ``capabilities`` and ``describe``
append it to their one-line error, and a kernel can do the same
(:meth:`protocol_py.client.ModelClient.connection_hint`).

The hint is built from the exception's type, OpenSSL's reason code and X509 verification
message (fixed texts), and the address the caller gave (cut to :data:`MAX_HINT_ADDRESS`
characters); nothing the server sent is echoed.
"""

from __future__ import annotations

import ssl
from typing import Final

from grpclib.exceptions import StreamTerminatedError

from protocol_py._compat.grpclib_goaway import GOAWAY_NO_ERROR, goaway_error_code
from protocol_py.transport.addresses import unix_socket_path

MAX_HINT_ADDRESS: Final = 200
"""Longest address quoted in a hint, characters (a longer one is cut with ``...``)."""

_MAX_VERIFY_MESSAGE: Final = 120


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def not_listening_hint(address: str) -> str:
    """The hint of a refused connect: ``nothing is listening on ADDRESS: is `protocol-py serve`
    running on ADDRESS?``."""
    where = _short(address, MAX_HINT_ADDRESS)
    return f"nothing is listening on {where}: is `protocol-py serve` running on {where}?"


def lost_hint(address: str, *, tls: bool) -> str:
    """The hint of a connection the server closed before any answer.

    * Under TLS: the server may have refused this client's certificate (mutual TLS; under TLS
      1.3 the refusal comes after the client's side of the handshake completed).
    * Plaintext over TCP: the server may use TLS.
    * Plaintext over a unix socket: the socket may be a launched plugin's, which accepts only
      the kernel that launched it (automatic mutual TLS), or a ``serve --socket`` with TLS.
    """
    if tls:
        return (
            "the server may have refused this client's certificate (mutual TLS: "
            "--tls-cert/--tls-key issued by a CA the server trusts)"
        )
    if unix_socket_path(address) is not None:
        return (
            "if this is the socket of a plugin launched with --handshake, it speaks automatic "
            "mutual TLS and accepts only the kernel that launched it "
            "(protocol_py.transport.launch); if it is a `serve --socket` with TLS, connect "
            "with --tls-ca"
        )
    return "if the server uses TLS, connect with --tls or --tls-ca"


def connection_hint(
    exc: BaseException, address: str, *, tls: bool, answered: bool = False
) -> str | None:
    """The likely cause of a failed connection to ``address``, or None when there is no hint.

    Args:
        exc: What the call (or the connect) raised.
        address: The server's address as the caller gave it (``host:port`` or ``unix:PATH``).
        tls: Whether the client used TLS.
        answered: Whether this connection already answered a call (a loss after an answer is
            not a transport mismatch: no hint).

    Returns:
        One sentence, no final period: a TLS client against a plaintext server
        (``WRONG_VERSION_NUMBER``), an untrusted or misnamed server certificate, nothing
        listening (:func:`not_listening_hint`), a server shutting down (GOAWAY NO_ERROR), or a
        connection lost before any answer (:func:`lost_hint`).
    """
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = _short(str(exc.verify_message or exc.reason or "not trusted"), _MAX_VERIFY_MESSAGE)
        if exc.verify_code == 62 or "hostname" in detail.lower():  # X509_V_ERR_HOSTNAME_MISMATCH
            return (
                f"the server's certificate does not name the host connected to ({detail}): "
                "check --server, or give the name it carries with --tls-server-name"
            )
        return (
            f"the server's certificate is not trusted ({detail}): pass the CA that issued it "
            "with --tls-ca FILE"
        )
    if isinstance(exc, ssl.SSLError):
        reason = str(exc.reason or "")
        if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
            return (
                f"the server answered in plaintext, not TLS ({reason}): it does not use TLS; "
                "connect without --tls, --tls-ca, --tls-cert"
            )
        if reason.endswith("ALERT_CERTIFICATE_REQUIRED") or reason.endswith("HANDSHAKE_FAILURE"):
            return lost_hint(address, tls=True)
        return None
    if isinstance(exc, ConnectionRefusedError | FileNotFoundError):
        return not_listening_hint(address)
    if goaway_error_code(exc) == GOAWAY_NO_ERROR:
        return "the server is shutting down (GOAWAY); retry when it is serving again"
    if answered:
        return None
    if isinstance(exc, StreamTerminatedError | ConnectionResetError | ConnectionAbortedError):
        return lost_hint(address, tls=tls)
    return None


__all__ = [
    "MAX_HINT_ADDRESS",
    "connection_hint",
    "lost_hint",
    "not_listening_hint",
]
