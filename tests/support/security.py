"""Helpers of the transport-security tests: a throwaway PKI (a CA and the certificates it
issues), a grpcio Describe probe, and the console script as a plugin subprocess.

Everything is generated with the ``cryptography`` package into a temporary directory; ECDSA
P-256 keys, one-hour validity, SANs ``localhost`` and ``127.0.0.1``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import select
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from protocol_py_gen.common.v1 import ProducerRef
from protocol_py_gen.model.v1 import DescribeResponse

from .servers import CONSOLE_SCRIPT

DESCRIBE = "/model.v1.ModelService/Describe"


@dataclass(frozen=True)
class Issued:
    """A certificate and key on disk (PEM files) and in memory."""

    cert: Path
    key: Path
    cert_pem: bytes
    key_pem: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class CA:
    """A self-signed certificate authority writing what it issues into ``directory``."""

    def __init__(self, directory: Path, name: str = "test CA") -> None:
        self.directory = directory
        self.name = name
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        self.cert_pem = self.certificate.public_bytes(serialization.Encoding.PEM)
        self.cert = directory / f"{name.replace(' ', '-')}.pem"
        self.cert.write_bytes(self.cert_pem)

    def issue(self, common_name: str, *, client: bool) -> Issued:
        """A leaf certificate for ``common_name`` (serverAuth, or clientAuth with ``client``)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        key_pem = _key_pem(key)
        stem = common_name.replace(" ", "-")
        cert_path = self.directory / f"{stem}.crt"
        key_path = self.directory / f"{stem}.key"
        cert_path.write_bytes(cert_pem)
        key_path.write_bytes(key_pem)
        return Issued(cert_path, key_path, cert_pem, key_pem)


def grpcio_describe(
    target: str,
    *,
    root: bytes | None = None,
    client: tuple[bytes, bytes] | None = None,
    server_name: str | None = None,
    timeout: float = 5.0,
) -> ProducerRef | str:
    """One Describe with google's grpcio client: the ProducerRef, or the failure as
    ``"CODE: details"``. ``root`` None means plaintext (``grpc.insecure_channel``); otherwise
    ``grpc.ssl_channel_credentials(root, key, cert)`` with the optional client key pair."""
    options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    if root is None:
        channel = grpc.insecure_channel(target)
    else:
        key, cert = client if client is not None else (None, None)
        credentials = grpc.ssl_channel_credentials(root, key, cert)
        channel = grpc.secure_channel(target, credentials, options=options)
    with channel:
        call = channel.unary_unary(DESCRIBE)
        try:
            reply = call(b"", timeout=timeout)
        except grpc.RpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
    producer = DescribeResponse.parse(reply).producer
    assert producer is not None
    return producer


def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run the console script; capture its output."""
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@dataclass
class Plugin:
    """``protocol-py serve --handshake ...`` running, with its parsed handshake line."""

    proc: subprocess.Popen[str]
    line: str
    stderr: str = ""

    @property
    def fields(self) -> list[str]:
        return self.line.rstrip("\n").split("|")

    def stop(self) -> int:
        """SIGTERM, wait, keep stderr in :attr:`stderr`; the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
        _, self.stderr = self.proc.communicate(timeout=15)
        return self.proc.returncode


def spawn_plugin(*args: str, env: dict[str, str] | None = None, timeout: float = 15.0) -> Plugin:
    """Start ``protocol-py serve --handshake *args`` and wait for its handshake line."""
    proc = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "serve", "--handshake", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.1)[0]:
            line = proc.stdout.readline()
            if line:
                return Plugin(proc, line)
            break
        if proc.poll() is not None:
            break
    proc.kill()
    _, err = proc.communicate()
    raise AssertionError(f"no handshake line; stderr:\n{err}")
