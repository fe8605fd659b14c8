"""Automatic mutual TLS for launched plugins: ``protocol_py.transport.launch`` starts
``protocol-py serve --handshake`` with ``PROTOCOL_PY_CLIENT_CERT`` in its environment; the plugin
answers with its own certificate in the fifth handshake field; only the launching kernel's client
completes an RPC."""

from __future__ import annotations

import asyncio
import base64
import datetime
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from grpclib.exceptions import StreamTerminatedError

from protocol_py.client.client import ModelClient
from protocol_py.transport.launch import LaunchError, launch
from protocol_py.transport.tls import (
    CERT_VALIDITY,
    CLIENT_CERT_ENV,
    MAX_CERT_PEM_BYTES,
    generate_certificate,
    pinned_client_context,
)

from ..support.security import CA, grpcio_describe, run_cli, spawn_plugin
from ..support.servers import CONSOLE_SCRIPT

SERVE = [str(CONSOLE_SCRIPT), "serve", "--handshake"]


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _read(path: Path) -> str:
    return path.read_text()


def _pem(der: bytes) -> bytes:
    return x509.load_der_x509_certificate(der).public_bytes(serialization.Encoding.PEM)


async def _refused(target: str, server_der: bytes) -> list[str]:
    """Describe from grpcio with no client certificate and with a different self-signed one,
    and from the project's client with that other certificate: every failure, as text."""
    root = _pem(server_der)
    other = generate_certificate()
    results = [
        await asyncio.to_thread(grpcio_describe, target, root=root, server_name="localhost"),
        await asyncio.to_thread(
            grpcio_describe,
            target,
            root=root,
            client=(other.key_pem, other.cert_pem),
            server_name="localhost",
        ),
        await asyncio.to_thread(grpcio_describe, target),  # plaintext
    ]
    context = pinned_client_context(server_der, other)
    try:
        async with ModelClient.connect(target, ssl=context, server_hostname="localhost") as c:
            await c.describe(timeout=10)
    except (ssl.SSLError, ConnectionError, StreamTerminatedError) as exc:
        results.append(f"project client: {type(exc).__name__}")
    else:
        results.append("project client: SUCCEEDED")
    return [str(r) for r in results]


async def test_only_the_launching_kernel_completes_an_rpc_over_the_private_socket(
    tmp_path: Path,
) -> None:
    log = (tmp_path / "plugin.log").open("w")
    async with launch(SERVE, stderr=log) as plugin:
        handshake = plugin.handshake
        assert plugin.auto_mtls
        assert (handshake.version, handshake.transport, handshake.protocol) == (1, "unix", "grpc")
        der = handshake.server_certificate
        assert der is not None
        assert (await plugin.client.describe(timeout=10)).name == "reference"
        target = handshake.target
        refusals = await _refused(target, der)
        assert all(r.startswith("UNAVAILABLE") for r in refusals[:3]), refusals
        assert refusals[3] != "project client: SUCCEEDED", refusals
        # The kernel's client still succeeds afterwards (the plugin kept serving).
        caps = await plugin.client.get_capabilities(timeout=10)
        assert [m.id for m in caps.models][:1] == ["reference-large"]
        socket_path = handshake.address
        assert _exists(socket_path)
    assert plugin.process.returncode == 0
    assert not _exists(socket_path) and not _exists(os.path.dirname(socket_path))
    log.close()
    text = _read(tmp_path / "plugin.log")
    assert "serving reference on unix:" in text
    assert "transport security: automatic mutual TLS: only the launching kernel's" in text
    assert "PRIVATE KEY" not in text and "BEGIN CERTIFICATE" not in text


async def test_auto_mtls_over_tcp_refuses_a_client_without_the_certificate_in_the_handshake() -> (
    None
):
    async with launch([*SERVE, "--port", "0"], stderr=subprocess.DEVNULL) as plugin:
        assert plugin.handshake.transport == "tcp"
        host, _, port = plugin.handshake.address.rpartition(":")
        der = plugin.handshake.server_certificate
        assert host == "127.0.0.1" and der is not None
        refusals = await _refused(plugin.handshake.address, der)
        assert all(r.startswith("UNAVAILABLE") for r in refusals[:3]), refusals
        assert refusals[3] != "project client: SUCCEEDED", refusals
        # TLS 1.2: the missing client certificate is refused inside the handshake itself.
        context = ssl.create_default_context(cadata=_pem(der).decode())
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["h2"])
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            _, writer = await asyncio.open_connection(
                host, int(port), ssl=context, server_hostname="localhost"
            )
            writer.close()
        assert (await plugin.client.describe(timeout=10)).name == "reference"


def test_server_certificate_is_a_fresh_p256_self_signed_certificate() -> None:
    """The fifth field: standard base64 without padding of the DER certificate (as go-plugin),
    ECDSA P-256, valid for at most CERT_VALIDITY, SANs localhost and 127.0.0.1; each start
    makes a new one. grpcio holding the kernel's key pair and pinning that certificate
    succeeds (so the refusals above are the certificates, not the probe)."""
    kernel = generate_certificate()
    env = {CLIENT_CERT_ENV: kernel.cert_pem.decode()}
    first, second = spawn_plugin(env=env), spawn_plugin(env=env)
    try:
        fields = first.fields
        assert len(fields) == 5 and fields[:2] == ["1", "unix"] and fields[3] == "grpc"
        encoded = fields[4]
        assert "=" not in encoded and "-" not in encoded and "_" not in encoded
        der = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        cert = x509.load_der_x509_certificate(der)
        public_key = cert.public_key()
        assert isinstance(public_key, ec.EllipticCurvePublicKey)
        assert public_key.curve.name == "secp256r1"
        assert cert.issuer == cert.subject
        lifetime = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
        assert datetime.timedelta(0) < lifetime <= CERT_VALIDITY
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert san.get_values_for_type(x509.DNSName) == ["localhost"]
        assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
        assert second.fields[4] != encoded
        kernel_probe = grpcio_describe(
            f"unix:{fields[2]}",
            root=_pem(der),
            client=(kernel.key_pem, kernel.cert_pem),
            server_name="localhost",
        )
        assert not isinstance(kernel_probe, str), kernel_probe
        assert kernel_probe.name == "reference"
    finally:
        assert first.stop() == 0
        assert second.stop() == 0


def test_auto_mtls_accepts_only_the_kernel_certificate_itself(tmp_path: Path) -> None:
    """Even when the kernel's certificate is a CA, a certificate it issued (which verifies
    against it) is refused: the server compares the peer certificate with the pinned one
    exactly. The kernel's own certificate still succeeds, before and after."""
    kernel_ca = CA(tmp_path, "kernel CA")
    issued = kernel_ca.issue("issued by the kernel", client=True)
    kernel_key = kernel_ca.key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    plugin = spawn_plugin(env={CLIENT_CERT_ENV: kernel_ca.cert_pem.decode()})
    try:
        target = f"unix:{plugin.fields[2]}"
        root = _pem(base64.b64decode(plugin.fields[4] + "=" * (-len(plugin.fields[4]) % 4)))

        def describe(key: bytes, cert: bytes) -> object:
            return grpcio_describe(target, root=root, client=(key, cert), server_name="localhost")

        first = describe(kernel_key, kernel_ca.cert_pem)
        assert not isinstance(first, str), first
        refused = describe(issued.key_pem, issued.cert_pem)
        assert isinstance(refused, str) and refused.startswith("UNAVAILABLE"), refused
        again = describe(kernel_key, kernel_ca.cert_pem)
        assert not isinstance(again, str), again
    finally:
        assert plugin.stop() == 0
    assert "refused a TLS connection: its client certificate is not the kernel's" in (plugin.stderr)


def test_serve_refuses_a_bad_client_certificate_without_echoing_it() -> None:
    secret_like = "not a certificate sk-live-1234567890"
    bad = subprocess.run(
        [*SERVE, "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**_env(), CLIENT_CERT_ENV: secret_like},
        check=False,
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert f"{CLIENT_CERT_ENV}: not a PEM certificate" in bad.stderr
    assert "sk-live" not in bad.stderr
    huge = subprocess.run(
        [*SERVE],
        capture_output=True,
        text=True,
        timeout=30,
        env={**_env(), CLIENT_CERT_ENV: "A" * (MAX_CERT_PEM_BYTES + 1)},
        check=False,
    )
    assert huge.returncode == 2
    assert f"more than {MAX_CERT_PEM_BYTES}" in huge.stderr
    both = run_cli("serve", "--tls-cert", "c.pem", "--tls-key", "k.pem")  # no env: file error
    assert both.returncode == 2 and "--tls-cert/--tls-key: no such file" in both.stderr
    conflict = subprocess.run(
        [*SERVE, "--tls-cert", "c.pem", "--tls-key", "k.pem"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**_env(), CLIENT_CERT_ENV: generate_certificate().cert_pem.decode()},
        check=False,
    )
    assert conflict.returncode == 2
    assert "cannot be combined with --tls-cert" in conflict.stderr


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != CLIENT_CERT_ENV}


async def test_launch_close_removes_the_private_socket_of_a_killed_plugin() -> None:
    async with launch(SERVE, stderr=subprocess.DEVNULL) as plugin:
        path = plugin.handshake.address
        plugin.process.kill()  # no chance to clean up itself
        await plugin.process.wait()
        assert _exists(path)
    assert not _exists(path) and not _exists(os.path.dirname(path))


async def test_launch_without_auto_mtls_connects_in_plaintext() -> None:
    async with launch(SERVE, auto_mtls=False, stderr=subprocess.DEVNULL) as plugin:
        assert not plugin.auto_mtls
        assert plugin.handshake.server_certificate is None
        assert (await plugin.client.describe(timeout=10)).name == "reference"


async def test_launch_fails_clearly_and_stops_the_plugin(tmp_path: Path) -> None:
    python = sys.executable
    started = time.monotonic()
    with pytest.raises(LaunchError, match=r"no handshake line from the plugin within 0.5 s"):
        async with launch([python, "-c", "import time; time.sleep(60)"], start_timeout=0.5):
            pass
    elapsed = time.monotonic() - started
    print(f"silent plugin refused after {elapsed:.2f} s (start_timeout 0.5 s)")
    assert elapsed < 30  # killed at the timeout, not waited for
    with pytest.raises(LaunchError, match=r"exited \(status 3\) before printing"):
        async with launch([python, "-c", "raise SystemExit(3)"]):
            pass
    old_plugin = "print('1|tcp|127.0.0.1:9|grpc', flush=True); import time; time.sleep(60)"
    with pytest.raises(LaunchError, match=r"did not answer automatic mutual TLS"):
        async with launch([python, "-c", old_plugin], stop_timeout=1):
            pass
    with pytest.raises(LaunchError, match=r"bad handshake line: handshake version '7'"):
        async with launch([python, "-c", "print('7|tcp|127.0.0.1:9|grpc')"]):
            pass
    refused = [*SERVE, "--port", "70000"]
    with pytest.raises(LaunchError, match=r"exited \(status 2\)"):
        async with launch(refused, stderr=subprocess.DEVNULL):
            pass


@pytest.mark.parametrize(
    "output",
    [
        "'1|tcp|127.0.0.1:1|grpc|' + 'A' * 20_000_000",  # a handshake line far over the limit
        "'x' * 20_000_000",  # no newline at all
    ],
)
async def test_launch_refuses_an_overlong_handshake_line_within_the_start_timeout(
    output: str,
) -> None:
    """After the kill, ``launch`` returns even though asyncio's ``Process.wait`` waits for the
    stdout pipe to close while its reader sits paused on unread output."""
    code = f"import sys, time; sys.stdout.write({output}); sys.stdout.flush(); time.sleep(60)"
    started = time.monotonic()
    with pytest.raises(LaunchError, match=r"handshake line is longer than 16384 bytes"):
        async with asyncio.timeout(30):  # the bug: hung here forever
            async with launch([sys.executable, "-c", code], start_timeout=5, stop_timeout=1):
                pass
    elapsed = time.monotonic() - started
    print(f"overlong handshake output refused after {elapsed:.2f} s (start_timeout 5 s)")
    assert elapsed < 5 + 5  # start_timeout, plus the reap bound


async def test_launch_refuses_a_certificate_field_that_is_not_a_certificate() -> None:
    """Valid base64 that is not DER is a typed error, never a raw ``ssl.SSLError``."""
    code = "print('1|tcp|127.0.0.1:9|grpc|QUFBQQ', flush=True); import time; time.sleep(60)"
    with pytest.raises(
        LaunchError,
        match=r"^bad handshake line: the server certificate \(field 5; field 6 of go-plugin.s "
        r"layout\) is not a DER X\.509",
    ):
        async with launch([sys.executable, "-c", code], stop_timeout=1):
            pass


async def test_launch_refuses_a_non_loopback_tcp_address() -> None:
    code = "print('1|tcp|192.0.2.1:443|grpc', flush=True); import time; time.sleep(60)"
    with pytest.raises(LaunchError, match=r"handshake address \(field 3\): .*'192\.0\.2\.1:443'"):
        async with launch([sys.executable, "-c", code], auto_mtls=False, stop_timeout=1):
            pass


async def test_launch_close_leaves_a_socket_the_plugin_did_not_create(tmp_path: Path) -> None:
    """A hostile plugin that names another live server's socket cannot make close() delete
    it: only a socket in the plugin's own private directory is removed."""
    async with launch(SERVE, stderr=subprocess.DEVNULL) as victim:
        victim_path = victim.handshake.address  # a real private protocol-py-* socket
        outside = tmp_path / "operator.sock"
        outside_server = spawn_plugin("--socket", str(outside))
        try:
            for named in (victim_path, str(outside)):
                code = f"print('1|unix|{named}|grpc', flush=True); import time; time.sleep(60)"
                async with launch([sys.executable, "-c", code], auto_mtls=False, stop_timeout=1):
                    pass
                assert _exists(named), named
            assert (await victim.client.describe(timeout=10)).name == "reference"
        finally:
            assert outside_server.stop() == 0


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan's parent may never reap it)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return "\nState:\tZ" not in status


KERNEL = f"""
import asyncio, subprocess, sys
from protocol_py.transport.launch import launch
async def main():
    async with launch({SERVE!r}, stderr=subprocess.DEVNULL) as plugin:
        print(plugin.process.pid, plugin.handshake.address, flush=True)
        await asyncio.sleep(120)
asyncio.run(main())
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads process states from /proc")
def test_a_launched_plugin_exits_when_its_kernel_is_killed() -> None:
    """A plugin does not outlive a SIGKILLed kernel (adopted by PID 1, keeping the key and its
    socket): it shuts down on end of file on its stdin pipe."""
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL], stdout=subprocess.PIPE, text=True)
    assert kernel.stdout is not None
    pid_text, path = kernel.stdout.readline().split()
    pid = int(pid_text)
    assert _alive(pid) and _exists(path)
    kernel.kill()  # SIGKILL: no cleanup at all in the kernel
    kernel.wait()
    started = time.monotonic()
    while (_alive(pid) or _exists(path)) and time.monotonic() - started < 30:
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    print(f"plugin exited {elapsed:.2f} s after its kernel was killed")
    if _alive(pid):
        os.kill(pid, signal.SIGTERM)  # leave no orphan behind when this fails
    assert not _alive(pid), "the plugin outlived its kernel"
    assert not _exists(path) and not _exists(os.path.dirname(path))
