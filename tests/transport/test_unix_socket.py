"""Unix-domain sockets: ``serve --socket PATH``, the
private socket of ``serve --handshake`` without an address (0700 directory, 0600 socket,
``1|unix|PATH|grpc``, removed on shutdown), ``unix:`` addresses in the client, the CLI and
grpcio, and another user refused by the file-system permissions."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import stat
from pathlib import Path

import pytest

from protocol_py.client.client import ModelClient
from protocol_py.errors import InvalidValueError
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer
from protocol_py.server import serve as serving
from protocol_py.transport.addresses import MAX_UNIX_PATH_BYTES, unix_socket_path
from protocol_py.transport.listen import PRIVATE_DIR_PREFIX, SOCKET_NAME

from ..support.security import grpcio_describe, run_cli, spawn_plugin

NOBODY = 65534


def connect_as(uid: int, path: str) -> int:
    """Connect to the unix socket ``path`` from a forked child running as ``uid``/``uid``
    (no supplementary groups); the child's exit status is 0 when it connected, else the
    errno of the failure."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(path)
        except OSError as exc:
            code = exc.errno or 255
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def modes(path: str) -> tuple[bool, int, int]:
    """(is a socket, permission bits, owner uid) of ``path``."""
    info = os.stat(path)
    return stat.S_ISSOCK(info.st_mode), stat.S_IMODE(info.st_mode), info.st_uid


def exists(path: str) -> bool:
    return os.path.exists(path)


async def _describe(address: str) -> str:
    async with ModelClient.connect(address) as client:
        return (await client.describe(timeout=10)).name


async def test_handshake_without_address_serves_a_private_socket_removed_on_shutdown() -> None:
    plugin = spawn_plugin()
    try:
        version, transport, path, protocol = plugin.fields
        assert (version, transport, protocol) == ("1", "unix", "grpc")
        directory = os.path.dirname(path)
        assert os.path.basename(path) == SOCKET_NAME
        assert os.path.basename(directory).startswith(PRIVATE_DIR_PREFIX)
        assert modes(directory) == (False, 0o700, os.getuid())
        assert modes(path) == (True, 0o600, os.getuid())
        # The project's client, in both of grpcio's spellings, and grpcio itself.
        assert await _describe(f"unix:{path}") == "reference"
        assert await _describe(f"unix://{path}") == "reference"  # unix:///abs/path
        producer = await asyncio.to_thread(grpcio_describe, f"unix:{path}")
        assert not isinstance(producer, str), producer
        assert producer.name == "reference"
        # The CLI's client commands.
        described = run_cli("describe", "--server", f"unix:{path}")
        assert described.returncode == 0, described.stderr
        assert "reference" in described.stdout
        caps = run_cli("capabilities", "--server", f"unix://{path}")
        assert caps.returncode == 0 and "reference-large" in caps.stdout, caps.stderr
        chat = run_cli("chat", "--server", f"unix:{path}", "Hello there")
        assert chat.returncode == 0, chat.stderr
        assert chat.stdout.strip()
    finally:
        assert plugin.stop() == 0
    assert not exists(path)
    assert not exists(directory)
    assert "transport security: unix socket, mode 600: only its owner's processes" in (
        plugin.stderr
    )


async def test_serve_socket_path_listens_there_and_removes_only_the_socket(
    tmp_path: Path,
) -> None:
    path = tmp_path / "model.sock"
    plugin = spawn_plugin("--socket", str(path))
    try:
        assert plugin.line == f"1|unix|{path}|grpc\n"
        assert modes(str(path)) == (True, 0o600, os.getuid())
        assert await _describe(f"unix:{path}") == "reference"
    finally:
        assert plugin.stop() == 0
    assert not exists(str(path))
    assert exists(str(tmp_path))  # the directory was the operator's: kept


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")
async def test_another_user_cannot_connect_to_the_plugin_socket(tmp_path: Path) -> None:
    """Done when: a second local process of another user cannot connect, neither to the
    private socket (its 0700 directory) nor to a 0600 ``--socket`` in a world-readable
    directory; the owner still can, before and after."""
    private = spawn_plugin()
    os.chmod(tmp_path, 0o755)
    shared = tmp_path / "shared.sock"
    explicit = spawn_plugin("--socket", str(shared))
    try:
        private_path = private.fields[2]
        assert connect_as(NOBODY, private_path) == errno.EACCES
        assert connect_as(NOBODY, str(shared)) == errno.EACCES
        # The same check as root connects: the refusal is the permissions, nothing else.
        assert connect_as(0, private_path) == 0
        assert connect_as(0, str(shared)) == 0
        assert await _describe(f"unix:{private_path}") == "reference"
        assert await _describe(f"unix:{shared}") == "reference"
    finally:
        assert private.stop() == 0
        assert explicit.stop() == 0


@pytest.mark.parametrize(
    ("address", "path"),
    [
        ("unix:/tmp/a.sock", "/tmp/a.sock"),
        ("unix:///tmp/a.sock", "/tmp/a.sock"),
        ("unix:relative/a.sock", "relative/a.sock"),
        ("127.0.0.1:50051", None),
        ("localhost", None),
    ],
)
def test_unix_socket_path_reads_grpcio_spellings(address: str, path: str | None) -> None:
    assert unix_socket_path(address) == path


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("unix:", "address.unix.empty"),
        ("unix://host/a.sock", "address.unix.authority"),
        ("unix-abstract:name", "address.unix.abstract"),
        ("unix:/tmp/a\x00b", "address.unix.nul"),
        ("unix:/" + "x" * MAX_UNIX_PATH_BYTES, "address.unix.length"),
    ],
)
def test_unix_socket_path_refuses_malformed_addresses(address: str, rule: str) -> None:
    with pytest.raises(InvalidValueError) as info:
        unix_socket_path(address)
    assert info.value.rule == rule
    assert len(str(info.value)) < 400  # caller text is quoted, bounded


def test_serve_refuses_conflicting_or_bad_socket_options(tmp_path: Path) -> None:
    both = run_cli("serve", "--socket", str(tmp_path / "a.sock"), "--port", "0")
    assert both.returncode == 2
    assert "--socket cannot be combined with --host or --port" in both.stderr
    long = run_cli("serve", "--socket", "/" + "x" * 200)
    assert long.returncode == 2
    assert f"more than the {MAX_UNIX_PATH_BYTES} a unix socket path may have" in long.stderr
    bar = run_cli("serve", "--handshake", "--socket", str(tmp_path / "a|b.sock"))
    assert bar.returncode == 2 and bar.stdout == ""
    assert "--socket: a path containing '|' or a line break cannot be announced" in bar.stderr
    busy = run_cli("serve", "--socket", str(tmp_path / "no-such-dir" / "a.sock"))
    assert busy.returncode == 1
    assert busy.stderr.startswith("protocol-py serve: cannot listen on unix:")


async def test_serve_async_with_handshake_and_no_address_uses_a_private_socket(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The library entry point (``protocol_py.serve_async``) listens exactly as the CLI does:
    a private socket announced as ``1|unix|PATH|grpc``, removed with its directory after."""
    stop = asyncio.Event()
    ready = asyncio.Event()
    task = asyncio.create_task(
        serving.serve_async(
            ReferenceProvider(),
            handshake=True,
            log_level=None,
            handle_signals=False,
            stop=stop,
            on_started=lambda server: ready.set(),
        )
    )
    await asyncio.wait_for(ready.wait(), 30)
    await asyncio.sleep(0)  # the handshake line is written right after on_started
    line = capsys.readouterr().out
    version, transport, path, protocol = line.rstrip("\n").split("|")
    assert (version, transport, protocol) == ("1", "unix", "grpc")
    assert modes(path) == (True, 0o600, os.getuid())
    assert await _describe(f"unix:{path}") == "reference"
    stop.set()
    await asyncio.wait_for(task, 30)
    assert not exists(path) and not exists(os.path.dirname(path))


async def test_a_second_server_refuses_a_live_socket_and_the_first_keeps_serving(
    tmp_path: Path,
) -> None:
    """A second ``serve --socket PATH`` never takes over a live server's socket (asyncio's
    create_unix_server would unlink it)."""
    path = tmp_path / "model.sock"
    first = spawn_plugin("--socket", str(path))
    try:
        second = run_cli("serve", "--socket", str(path))
        assert second.returncode == 1
        assert second.stderr.strip().endswith(
            f"cannot listen on unix:{path}: address in use: a server is listening on '{path}'"
        ), second.stderr
        assert await _describe(f"unix:{path}") == "reference"  # still the first server's
        producer = await asyncio.to_thread(grpcio_describe, f"unix:{path}")
        assert not isinstance(producer, str), producer
        assert producer.name == "reference"
    finally:
        assert first.stop() == 0
    assert not exists(str(path))


async def test_a_stale_socket_file_is_replaced_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "stale.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(path)  # a server that died without removing its socket: connect is refused
    dead.close()
    server = ModelServer(ReferenceProvider())
    await server.start(path=path)
    try:
        assert await _describe(f"unix:{path}") == "reference"
    finally:
        await server.shutdown(grace_period=0)
    assert f"replacing the stale socket file '{path}'" in caplog.text
    assert not exists(path)


async def test_a_file_that_is_not_a_socket_is_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("keep me")
    server = ModelServer(ReferenceProvider())
    with pytest.raises(OSError, match=r"address in use: .*notes.txt' exists and is not a socket"):
        await server.start(path=str(path))
    assert path.read_text() == "keep me"


async def test_shutdown_leaves_a_socket_another_server_created_at_the_same_path(
    tmp_path: Path,
) -> None:
    """On shutdown a server unlinks its socket path only while it is still the socket file it
    created (its inode), never a later server's."""
    path = str(tmp_path / "model.sock")
    first = ModelServer(ReferenceProvider())
    await first.start(path=path)
    os.unlink(path)  # e.g. an operator removed it and a new server took the path
    second = ModelServer(ReferenceProvider())
    await second.start(path=path)
    try:
        await first.shutdown(grace_period=0)
        assert exists(path)
        assert await _describe(f"unix:{path}") == "reference"  # the second still serves
    finally:
        await second.shutdown(grace_period=0)
    assert not exists(path)
