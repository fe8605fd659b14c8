"""TLS for the plugin transport: SSL contexts for grpclib and throwaway certificates.

Three uses (README "Security"):

* TLS and mutual TLS from files (``serve --tls-cert F --tls-key F [--tls-client-ca F]``;
  ``chat``/``capabilities``/``describe --tls-ca F [--tls-cert F --tls-key F]``):
  :func:`server_context` and :func:`client_context`.
* Automatic mutual TLS (hashicorp/go-plugin's AutoMTLS, adapted): the kernel generates a key
  pair and a self-signed client certificate (:func:`generate_certificate`) and puts the PEM
  certificate in the plugin's environment as :data:`CLIENT_CERT_ENV`; the plugin generates its
  own and trusts only the kernel's (:func:`auto_mtls_server_context`); the kernel pins the
  plugin's certificate, received in the handshake line (:func:`pinned_client_context`).
* The certificates: ECDSA P-256 keys, SHA-256 signatures, valid for
  :data:`CERT_VALIDITY` from :data:`CERT_BACKDATE` before now, with subject alternative names
  ``localhost`` and ``127.0.0.1`` (:data:`CERT_SAN_DNS`, :data:`CERT_SAN_IP`), extended key
  usage both serverAuth and clientAuth.

Every context offers and requires ALPN ``h2`` (grpclib and grpcio both need it), accepts TLS
1.2 or newer only, and (client side) checks the server's host name against the certificate.
Private keys never leave memory except for the instant :mod:`ssl` needs them as a file: they
are written into a fresh 0700 temporary directory, loaded and deleted at once
(:func:`load_key_pair`). Nothing here logs key material.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from protocol_py.errors import InvalidValueError

CLIENT_CERT_ENV: Final = "PROTOCOL_PY_CLIENT_CERT"
"""Environment variable holding the kernel's PEM client certificate (AutoMTLS)."""

MAX_CERT_PEM_BYTES: Final = 64 * 1024
"""Largest PEM certificate accepted from :data:`CLIENT_CERT_ENV`, bytes (one ECDSA or RSA
certificate is 0.5-2 KiB; the bound stops a runaway environment value)."""

CERT_VALIDITY: Final = datetime.timedelta(days=30)
"""Validity of a generated certificate, counted from now (30 days: longer than any plugin
process is expected to run, short enough that a leaked certificate soon expires)."""

CERT_BACKDATE: Final = datetime.timedelta(minutes=5)
"""How far before now a generated certificate's validity starts (tolerates clock skew)."""

CERT_SAN_DNS: Final = "localhost"
"""DNS subject alternative name of a generated certificate; also the TLS server name a client
checks over a unix socket (grpcio's default authority for ``unix:`` targets)."""

CERT_SAN_IP: Final = "127.0.0.1"
"""IP subject alternative name of a generated certificate (the default TCP listening host)."""

ALPN_PROTOCOLS: Final = ("h2",)
"""ALPN protocols offered and accepted: HTTP/2 only (gRPC)."""


class TLSConfigError(InvalidValueError):
    """A certificate, key or CA file (or :data:`CLIENT_CERT_ENV`) cannot be used; the message
    names the option or variable and the reason."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate with its private key.

    Attributes:
        cert_pem: The certificate, PEM.
        key_pem: The private key, unencrypted PKCS#8 PEM (keep it in memory only).
        cert_der: The certificate, DER (what the AutoMTLS handshake field carries).
    """

    cert_pem: bytes
    key_pem: bytes
    cert_der: bytes


def generate_certificate(common_name: str = CERT_SAN_DNS) -> KeyPair:
    """A fresh ECDSA P-256 key and a self-signed certificate for it.

    The certificate is valid from :data:`CERT_BACKDATE` ago for :data:`CERT_VALIDITY`, names
    ``common_name`` as subject and issuer, carries the SANs :data:`CERT_SAN_DNS` and
    :data:`CERT_SAN_IP`, is not a CA (it can vouch for nothing but itself) and is usable for
    both serverAuth and clientAuth.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CERT_BACKDATE)
        .not_valid_after(now + CERT_VALIDITY)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(CERT_SAN_DNS), x509.IPAddress(ipaddress.ip_address(CERT_SAN_IP))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    return KeyPair(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        cert_der=cert.public_bytes(serialization.Encoding.DER),
    )


def load_key_pair(context: ssl.SSLContext, pair: KeyPair) -> None:
    """Load an in-memory certificate and key into ``context``.

    :mod:`ssl` reads a certificate chain only from files, so both PEMs are written into a fresh
    temporary directory of mode 0700, loaded and deleted before this returns.
    """
    with tempfile.TemporaryDirectory(prefix="protocol-py-tls-") as tmp:
        cert_path = Path(tmp, "cert.pem")
        key_path = Path(tmp, "key.pem")
        for path, data in ((cert_path, pair.cert_pem), (key_path, pair.key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        context.load_cert_chain(cert_path, key_path)


def _base_context(purpose: ssl.Purpose) -> ssl.SSLContext:
    context = ssl.create_default_context(purpose)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(list(ALPN_PROTOCOLS))
    return context


def _load(option: str, what: str, rule: str, load: Callable[[], None]) -> None:
    """Run ``load`` (an ``SSLContext`` loader); a failure becomes a TLSConfigError naming
    ``option`` and ``what`` could not be loaded."""
    try:
        load()
    except FileNotFoundError as exc:
        raise TLSConfigError(
            f"{option}: no such file {_short(exc.filename)}", rule="tls.file"
        ) from None
    except (ssl.SSLError, OSError) as exc:
        raise TLSConfigError(f"{option}: cannot load {what}: {_reason(exc)}", rule=rule) from None


def _load_chain(context: ssl.SSLContext, cert_file: str, key_file: str) -> None:
    _load(
        "--tls-cert/--tls-key",
        "the certificate and key",
        "tls.key_pair",
        lambda: context.load_cert_chain(cert_file, key_file),
    )


def _load_ca(context: ssl.SSLContext, ca_file: str, option: str) -> None:
    _load(
        option,
        "the CA certificates",
        "tls.ca",
        lambda: context.load_verify_locations(cafile=ca_file),
    )


def server_context(
    cert_file: str, key_file: str, client_ca_file: str | None = None
) -> ssl.SSLContext:
    """A server SSL context from PEM files: TLS, and with ``client_ca_file`` mutual TLS.

    Args:
        cert_file: The server's certificate chain, PEM (``--tls-cert``).
        key_file: Its private key, PEM (``--tls-key``).
        client_ca_file: CA certificates, PEM (``--tls-client-ca``): when given, a client must
            present a certificate issued by one of them or the TLS handshake fails.

    Raises:
        TLSConfigError: a file is missing or does not hold what it should (names the option).
    """
    context = _base_context(ssl.Purpose.CLIENT_AUTH)
    _load_chain(context, cert_file, key_file)
    if client_ca_file is not None:
        _load_ca(context, client_ca_file, "--tls-client-ca")
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_context(
    ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None
) -> ssl.SSLContext:
    """A client SSL context from PEM files.

    Args:
        ca_file: CA certificates the server's certificate must chain to (``--tls-ca``); None
            uses the system's default trust store.
        cert_file: The client certificate for mutual TLS (``--tls-cert``); needs ``key_file``.
        key_file: Its private key (``--tls-key``).

    Raises:
        TLSConfigError: only one of ``cert_file``/``key_file`` given, or a file cannot be used.
    """
    if (cert_file is None) != (key_file is None):
        raise TLSConfigError("--tls-cert and --tls-key must be given together", rule="tls.key_pair")
    context = _base_context(ssl.Purpose.SERVER_AUTH)
    if ca_file is not None:
        _load_ca(context, ca_file, "--tls-ca")
    if cert_file is not None and key_file is not None:
        _load_chain(context, cert_file, key_file)
    return context


def parse_client_certificate(pem: str, variable: str = CLIENT_CERT_ENV) -> bytes:
    """Check the value of :data:`CLIENT_CERT_ENV` (or of ``variable``, the environment
    variable it came from: go-plugin's ``PLUGIN_CLIENT_CERT``): exactly one PEM certificate.

    Returns:
        The certificate, PEM bytes.

    Raises:
        TLSConfigError: longer than :data:`MAX_CERT_PEM_BYTES`, not PEM, or not exactly one
            certificate (the message names ``variable``, never its value).
    """
    data = pem.encode("utf-8", "replace")
    if len(data) > MAX_CERT_PEM_BYTES:
        raise TLSConfigError(
            f"{variable}: {len(data)} bytes, more than {MAX_CERT_PEM_BYTES}",
            rule="tls.client_cert.size",
        )
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise TLSConfigError(
            f"{variable}: not a PEM certificate", rule="tls.client_cert.pem"
        ) from None
    if len(certs) != 1:
        raise TLSConfigError(
            f"{variable}: expected exactly one certificate, got {len(certs)}",
            rule="tls.client_cert.count",
        )
    return certs[0].public_bytes(serialization.Encoding.PEM)


def auto_mtls_server_context(client_cert_pem: bytes) -> tuple[ssl.SSLContext, KeyPair]:
    """The plugin side of AutoMTLS: a fresh server key pair and a context that requires a
    client certificate and trusts only ``client_cert_pem`` (a self-signed certificate: only its
    holder's key completes the handshake).

    Returns:
        ``(context, server key pair)``; the pair's ``cert_der`` goes into the handshake line.
    """
    pair = generate_certificate()
    context = _base_context(ssl.Purpose.CLIENT_AUTH)
    load_key_pair(context, pair)
    context.load_verify_locations(cadata=client_cert_pem.decode("ascii"))
    context.verify_mode = ssl.CERT_REQUIRED
    return context, pair


def pinned_client_context(server_cert_der: bytes, client: KeyPair) -> ssl.SSLContext:
    """The kernel side of AutoMTLS: trust only ``server_cert_der`` (from the handshake line)
    and present ``client``'s certificate.

    The server name checked is :data:`CERT_SAN_DNS` (over a unix socket) or the TCP host; the
    generated certificates carry both ``localhost`` and ``127.0.0.1``.
    """
    context = _base_context(ssl.Purpose.SERVER_AUTH)
    context.load_verify_locations(cadata=server_cert_der)
    load_key_pair(context, client)
    return context


def _short(value: object, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters (caller text is never echoed unbounded)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__


__all__ = [
    "ALPN_PROTOCOLS",
    "CERT_BACKDATE",
    "CERT_SAN_DNS",
    "CERT_SAN_IP",
    "CERT_VALIDITY",
    "CLIENT_CERT_ENV",
    "MAX_CERT_PEM_BYTES",
    "KeyPair",
    "TLSConfigError",
    "auto_mtls_server_context",
    "client_context",
    "generate_certificate",
    "load_key_pair",
    "parse_client_certificate",
    "pinned_client_context",
    "server_context",
]
