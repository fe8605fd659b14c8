"""``protocol-py serve --handshake`` launched as hashicorp/go-plugin launches a plugin: its
variables in the environment, stdin not a pipe (go-plugin hands over the kernel's own).
What go-plugin calls (health ``plugin``, GRPCController/Shutdown, the broker and stdio
streams), how it is stopped, and what it leaves behind (nothing)."""

from __future__ import annotations

import asyncio
import base64
import os
import select
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import betterproto2
import grpc
import pytest
from grpclib.health.v1 import health_pb2

from protocol_py.client.client import ModelClient
from protocol_py.transport.go_plugin import MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE
from protocol_py.transport.tls import generate_certificate, pinned_client_context
from protocol_py.version import PROTOCOL_VERSION

from ..support.servers import CONSOLE_SCRIPT, make_request

GO_PLUGIN = {MAGIC_COOKIE_KEY: MAGIC_COOKIE_VALUE, "PLUGIN_PROTOCOL_VERSIONS": "1"}
SHUTDOWN = "/plugin.GRPCController/Shutdown"
BROKER = "/plugin.GRPCBroker/StartStream"
STDIO = "/plugin.GRPCStdio/StreamStdio"
EXIT_TIMEOUT = 10.0


@dataclass
class GoPlugin:
    proc: subprocess.Popen[str]
    line: str
    tmpdir: Path

    @property
    def fields(self) -> list[str]:
        return self.line.rstrip("\n").split("|")

    @property
    def target(self) -> str:
        network, address = self.fields[2], self.fields[3]
        return f"unix:{address}" if network == "unix" else address

    def wait(self) -> tuple[int, str]:
        _, err = self.proc.communicate(timeout=EXIT_TIMEOUT)
        return self.proc.returncode, err


def clean_env(tmpdir: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUGIN_")}
    env.pop(MAGIC_COOKIE_KEY, None)
    env.pop("PROTOCOL_PY_CLIENT_CERT", None)
    env.pop("PROTOCOL_PY_EXIT_ON_STDIN_EOF", None)
    return {**env, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmpdir), **extra}


def spawn(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> GoPlugin:
    """``serve --handshake *args`` with go-plugin's variables, stdin /dev/null, its own TMPDIR."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "serve", "--handshake", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(tmpdir, {**GO_PLUGIN, **(env or {})}),
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.1)[0]:
            line = proc.stdout.readline()
            if line:
                return GoPlugin(proc, line, tmpdir)
            break
        if proc.poll() is not None:
            break
    proc.kill()
    _, err = proc.communicate()
    raise AssertionError(f"no handshake line; stderr:\n{err}")


@pytest.fixture
def plugins() -> Iterator[list[GoPlugin]]:
    started: list[GoPlugin] = []
    yield started
    for plugin in started:
        if plugin.proc.poll() is None:
            plugin.proc.kill()
        plugin.proc.communicate()


def channel(plugin: GoPlugin, kernel: Any = None) -> grpc.Channel:
    if kernel is None:
        return grpc.insecure_channel(plugin.target)
    der = base64.b64decode(plugin.fields[5] + "=" * (-len(plugin.fields[5]) % 4))
    root = ssl_pem(der)
    credentials = grpc.ssl_channel_credentials(root, kernel.key_pem, kernel.cert_pem)
    return grpc.secure_channel(
        plugin.target, credentials, options=[("grpc.ssl_target_name_override", "localhost")]
    )


def ssl_pem(der: bytes) -> bytes:
    return ssl.DER_cert_to_PEM_cert(der).encode("ascii")


def health(chan: grpc.Channel, service: str) -> str:
    check = chan.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )
    try:
        reply = check(health_pb2.HealthCheckRequest(service=service), timeout=10)
    except grpc.RpcError as exc:
        return str(exc.code().name)
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def shutdown(chan: grpc.Channel) -> bytes:
    reply: bytes = chan.unary_unary(SHUTDOWN)(b"", timeout=10)
    return reply


def test_unix_line_ping_and_shutdown_leave_nothing(tmp_path: Path, plugins: list[GoPlugin]) -> None:
    plugin = spawn(tmp_path)
    plugins.append(plugin)
    core, app, network, address, protocol, cert = plugin.fields
    assert (core, app, network, protocol, cert) == ("1", "1", "unix", "grpc", "")
    directory = Path(address).parent
    assert directory.parent == plugin.tmpdir and directory.name.startswith("protocol-py-")
    with channel(plugin) as chan:
        assert health(chan, "plugin") == "SERVING"
        assert health(chan, "model.v1.ModelService") == "SERVING"
        started = time.monotonic()
        assert shutdown(chan) == b""
    status, err = plugin.wait()
    elapsed = time.monotonic() - started
    assert status == 0, err
    assert elapsed < EXIT_TIMEOUT
    assert "the kernel asked this plugin to stop (go-plugin Shutdown); draining" in err
    assert "launched by a kernel built on hashicorp/go-plugin: protocol version 1" in err
    assert list(plugin.tmpdir.iterdir()) == []


def free_range(size: int = 20) -> tuple[int, int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        low = int(probe.getsockname()[1])
    return low, min(low + size, 65535)


async def test_tcp_in_the_port_range_with_auto_mtls(
    tmp_path: Path, plugins: list[GoPlugin]
) -> None:
    kernel = generate_certificate()
    low, high = free_range()
    env = {
        "PLUGIN_CLIENT_CERT": kernel.cert_pem.decode(),
        "PLUGIN_MIN_PORT": str(low),
        "PLUGIN_MAX_PORT": str(high),
    }
    plugin = spawn(tmp_path, "--host", "127.0.0.1", env=env)
    plugins.append(plugin)
    core, app, network, address, protocol, cert = plugin.fields
    assert (core, app, network, protocol) == ("1", "1", "tcp", "grpc")
    host, _, port = address.rpartition(":")
    assert host == "127.0.0.1" and low <= int(port) <= high
    assert len(cert) > 50 and "=" not in cert
    der = base64.b64decode(cert + "=" * (-len(cert) % 4))
    context = pinned_client_context(der, kernel)
    async with ModelClient.connect(address, ssl=context, server_hostname="localhost") as client:
        caps = await client.get_capabilities(timeout=10)
    assert caps.protocol_version == PROTOCOL_VERSION
    with grpc.insecure_channel(address) as plain:
        assert health(plain, "plugin") == "UNAVAILABLE"  # no TLS: no call at all
    with channel(plugin, kernel) as chan:
        assert health(chan, "plugin") == "SERVING"
        assert shutdown(chan) == b""
    status, err = plugin.wait()
    assert status == 0, err


def test_socket_in_the_kernels_directory(tmp_path: Path, plugins: list[GoPlugin]) -> None:
    kernel_dir = tmp_path / "kernel"
    kernel_dir.mkdir()
    plugin = spawn(tmp_path, env={"PLUGIN_UNIX_SOCKET_DIR": str(kernel_dir)})
    plugins.append(plugin)
    path = Path(plugin.fields[3])
    assert path.parent == kernel_dir and path.name.startswith("plugin-")
    assert path.is_socket() and (path.stat().st_mode & 0o777) == 0o600
    plugin.proc.send_signal(signal.SIGTERM)
    status, err = plugin.wait()
    assert status == 0, err
    assert kernel_dir.is_dir() and list(kernel_dir.iterdir()) == []
    assert list(plugin.tmpdir.iterdir()) == []


def test_broker_and_stdio_are_accepted_and_idle_until_shutdown(
    tmp_path: Path, plugins: list[GoPlugin]
) -> None:
    plugin = spawn(tmp_path)
    plugins.append(plugin)
    with channel(plugin) as chan:
        stdio = chan.unary_stream(STDIO)(b"")
        offers: list[bytes] = [b"\x08\x07\x12\x04unix\x1a\x05/x.so"]  # ConnInfo 7, unix, /x.so
        release = threading.Event()

        def requests() -> Iterator[bytes]:
            yield from offers
            release.wait(EXIT_TIMEOUT)

        broker = chan.stream_stream(BROKER)(requests())
        outcome: dict[str, Any] = {}

        def drain(name: str, call: Any) -> None:
            try:
                outcome[name] = list(call)
            except grpc.RpcError as exc:
                outcome[name] = exc.code()

        readers = [
            threading.Thread(target=drain, args=(name, call))
            for name, call in (("stdio", stdio), ("broker", broker))
        ]
        for reader in readers:
            reader.start()
        time.sleep(0.5)
        assert outcome == {}  # both still open, nothing sent
        assert health(chan, "plugin") == "SERVING"
        assert shutdown(chan) == b""
        for reader in readers:
            reader.join(EXIT_TIMEOUT)
        release.set()
    status, err = plugin.wait()
    assert status == 0, err
    assert set(outcome) == {"stdio", "broker"}
    for value in outcome.values():  # ended by the server's stop, never with a message
        assert value in ([], grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)
    assert "go-plugin broker: dropped a service offer from the kernel" in err


def test_sigint_is_ignored_and_sigterm_drains(tmp_path: Path, plugins: list[GoPlugin]) -> None:
    plugin = spawn(tmp_path)
    plugins.append(plugin)
    plugin.proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert plugin.proc.poll() is None
    with channel(plugin) as chan:
        assert health(chan, "plugin") == "SERVING"
    plugin.proc.send_signal(signal.SIGTERM)
    status, err = plugin.wait()
    assert status == 0, err
    assert "SIGINT ignored: a kernel built on go-plugin stops its plugins itself" in err
    assert list(plugin.tmpdir.iterdir()) == []


async def test_shutdown_lets_an_in_flight_stream_finish(
    tmp_path: Path, plugins: list[GoPlugin]
) -> None:
    plugin = spawn(tmp_path)
    plugins.append(plugin)
    async with ModelClient.connect(plugin.target) as client:
        await client.configure({"pace_tokens_per_second": 40}, timeout=10)
        events: list[str] = []

        async def turn() -> None:
            async for event in client.stream(make_request("Say hello in one line."), timeout=30):
                events.append(betterproto2.which_one_of(event, "event")[0])

        task = asyncio.create_task(turn())
        await asyncio.sleep(0.3)
        with grpc.insecure_channel(plugin.target) as chan:
            assert await asyncio.to_thread(shutdown, chan) == b""
        assert not task.done()  # the turn is still streaming while the server drains
        await asyncio.wait_for(task, 30)
    status, err = await asyncio.to_thread(plugin.wait)
    assert status == 0, err
    assert events and events[-1] == "stop"


def test_multiplexing_kernel_is_told_false(tmp_path: Path, plugins: list[GoPlugin]) -> None:
    plugin = spawn(tmp_path, env={"PLUGIN_MULTIPLEX_GRPC": "true"})
    plugins.append(plugin)
    assert len(plugin.fields) == 7 and plugin.fields[6] == "false"


def run_refused(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir(exist_ok=True)
    return subprocess.run(
        [str(CONSOLE_SCRIPT), "serve", "--handshake"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=clean_env(tmpdir, env),
        timeout=60,
        check=False,
    )


def test_without_the_cookie_it_says_it_is_a_plugin_and_exits_1(tmp_path: Path) -> None:
    done = run_refused(tmp_path, {"PLUGIN_PROTOCOL_VERSIONS": "1"})
    assert done.returncode == 1
    assert done.stdout == ""
    assert "this program is a model-provider plugin: a kernel starts it" in done.stderr
    assert "MODEL_PLUGIN_MAGIC_COOKIE is not set" in done.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_malformed_variable_is_a_usage_error(tmp_path: Path) -> None:
    done = run_refused(tmp_path, {**GO_PLUGIN, "PLUGIN_PROTOCOL_VERSIONS": "one"})
    assert done.returncode == 2
    assert "PLUGIN_PROTOCOL_VERSIONS: 'one' is not a version" in done.stderr
    assert done.stdout == ""
