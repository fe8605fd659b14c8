"""The kernel side of launching a plugin: subprocess, handshake, automatic mutual TLS.

:func:`launch` starts a plugin (any command that serves ModelService and prints a handshake
line, e.g. ``protocol-py serve --handshake``), reads its handshake line within a bounded start
timeout and yields a :class:`LaunchedPlugin` holding a
:class:`~protocol_py.client.client.ModelClient`
connected to it; leaving the ``async with`` block closes the client, stops the plugin (SIGTERM,
then SIGKILL after :data:`STOP_TIMEOUT`) and removes its private socket::

    async with launch(["protocol-py", "serve", "--handshake"]) as plugin:
        caps = await plugin.client.get_capabilities(timeout=10)

Automatic mutual TLS (hashicorp/go-plugin's AutoMTLS, adapted; README "Security"): a fresh
client key and self-signed certificate (:func:`protocol_py.transport.tls.generate_certificate`) are
made
for each launch and the PEM certificate is put in the plugin's environment as
``PROTOCOL_PY_CLIENT_CERT``; the plugin answers with its own fresh certificate in the fifth
handshake field, and the client trusts exactly that certificate and presents its own, so no
other process can complete a TLS handshake with the plugin, nor impersonate it to the kernel.
The client key never leaves this process's memory (except the instant :mod:`ssl` loads it from
a private temporary file).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Final

from protocol_py.bounded_text import bounded_message, quote_value
from protocol_py.client.client import ModelClient
from protocol_py.errors import ProtocolError
from protocol_py.transport.go_plugin import GO_PLUGIN_ENV, parse_handshake_line
from protocol_py.transport.handshake import (
    EXIT_ON_STDIN_EOF_ENV,
    MAX_HANDSHAKE_LINE_BYTES,
    ORDERLY_STOP,
    Handshake,
)
from protocol_py.transport.listen import is_private_socket_dir, remove_socket
from protocol_py.transport.tls import (
    CERT_SAN_DNS,
    CLIENT_CERT_ENV,
    generate_certificate,
    pinned_client_context,
)

log = logging.getLogger("protocol_py.transport.launch")

START_TIMEOUT: Final = 30.0
"""Default time a plugin gets to print its handshake line, seconds."""

STOP_TIMEOUT: Final = 10.0
"""Default time a plugin gets to exit after SIGTERM before it is killed, seconds."""

REAP_TIMEOUT: Final = 5.0
"""Longest wait for a plugin process to be reaped after SIGKILL, seconds (a process stuck in
uninterruptible sleep is then left behind, with a warning, rather than hanging the kernel)."""

CLOCK_SLACK: Final = 0.02
"""Seconds a private socket directory's change time may precede the launch and still count as
the plugin's own (Linux file-system timestamps come from a coarse clock, a tick behind
:func:`time.time`)."""

STDOUT_CHUNK: Final = 64 * 1024
"""Bytes read at a time when discarding a plugin's stdout after the handshake."""


class LaunchError(ProtocolError):
    """The plugin did not start: it exited, printed no handshake line within the start
    timeout, printed a malformed one (over
    :data:`~protocol_py.transport.addresses.MAX_HANDSHAKE_LINE_BYTES`,
    a TCP address not on loopback, a fifth field that is not a certificate, ...; the message
    names the field), or refused automatic mutual TLS. The plugin has been stopped when this
    is raised."""


@dataclass(eq=False)
class LaunchedPlugin:
    """A running plugin subprocess and a client connected to it.

    Attributes:
        process: The plugin's process.
        handshake: Its parsed handshake line.
        client: A client connected to it (pinned to its certificate under AutoMTLS).
        auto_mtls: True when the connection uses automatic mutual TLS.
        stop_timeout: Seconds :meth:`close` waits after SIGTERM before SIGKILL.
        started_at: When the plugin was started (:func:`time.time`, seconds).
    """

    process: asyncio.subprocess.Process
    handshake: Handshake
    client: ModelClient
    auto_mtls: bool
    stop_timeout: float = STOP_TIMEOUT
    started_at: float = 0.0
    _drain: asyncio.Task[None] | None = field(default=None, repr=False)

    async def close(self) -> None:
        """Close the client, stop the plugin and remove its private socket (idempotent).

        The socket (and its directory) is removed only when it sits in a private
        ``protocol-py-*`` directory under the temporary directory, owned by this user, mode
        0700, changed since the plugin started
        (:func:`~protocol_py.transport.addresses.is_private_socket_dir`): a plugin that named
        another
        server's socket in its handshake line cannot make the kernel delete it."""
        self.client.close()
        await _stop(self.process, self.stop_timeout)
        if self._drain is not None:
            self._drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._drain
        path = self.handshake.address
        if self.handshake.transport == "unix" and is_private_socket_dir(
            path, created_after=self.started_at
        ):
            remove_socket(path, owns_dir=True)


@contextlib.asynccontextmanager
async def launch(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    auto_mtls: bool = True,
    start_timeout: float = START_TIMEOUT,
    stop_timeout: float = STOP_TIMEOUT,
    stderr: int | IO[Any] | Callable[[str], None] | logging.Logger | None = None,
) -> AsyncIterator[LaunchedPlugin]:
    """Start a plugin and connect to it (see the module docstring); an async context manager
    whose exit calls :meth:`LaunchedPlugin.close`.

    Args:
        argv: The plugin's command line (it must print the handshake line on stdout).
        env: Its environment (default: this process's); ``PROTOCOL_PY_CLIENT_CERT`` is set
            (``auto_mtls``) or removed, and ``PROTOCOL_PY_EXIT_ON_STDIN_EOF=1`` is set: the
            plugin gets a stdin pipe whose end of file (this process exited or was killed)
            stops it (:func:`protocol_py.server.serve.watch_stdin_eof`). hashicorp/go-plugin's
            variables (:data:`~protocol_py.transport.go_plugin.GO_PLUGIN_ENV`, inherited when
            this kernel itself runs under go-plugin) are removed, so the plugin prints this
            package's handshake line; either layout is read
            (:func:`~protocol_py.transport.go_plugin.parse_handshake_line`).
        auto_mtls: Require automatic mutual TLS (a plugin that does not answer with a server
            certificate is refused). False: plaintext, for plugins that predate it.
        start_timeout: Seconds allowed for the handshake line.
        stop_timeout: Seconds :meth:`LaunchedPlugin.close` waits after SIGTERM.
        stderr: Where the plugin's stderr (its log records) goes. None (the default): passed
            through, the plugin writes to this process's stderr. A file descriptor, an open
            file or ``subprocess.DEVNULL``: written there. A callable: called with each line
            (text, newline removed, at most :data:`MAX_STDERR_LINE_BYTES` bytes, decoded with
            replacement). A :class:`logging.Logger`: each line becomes one INFO record
            ``plugin stderr: LINE`` of that logger. Lines are read until the plugin exits.

    Raises:
        LaunchError: see the class; the plugin is stopped first. Also when the command cannot
            be started (any :class:`OSError` of the process start: not found on ``PATH``, not
            executable, ...); the message names the command (cut to
            :data:`~protocol_py.bounded_text.MAX_ECHOED_VALUE_CHARS`) and the OS error.
    """
    environ = dict(os.environ if env is None else env)
    for name in (CLIENT_CERT_ENV, *GO_PLUGIN_ENV):
        environ.pop(name, None)
    pair = generate_certificate() if auto_mtls else None
    if pair is not None:
        environ[CLIENT_CERT_ENV] = pair.cert_pem.decode("ascii")
    environ[EXIT_ON_STDIN_EOF_ENV] = "1"
    started_at = time.time() - CLOCK_SLACK
    sink = _line_sink(stderr)
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.PIPE,  # its end of file tells the plugin this process is gone
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if sink is not None else stderr,  # type: ignore[arg-type]
            env=environ,
            limit=MAX_HANDSHAKE_LINE_BYTES,
        )
    except OSError as exc:
        raise LaunchError(_start_failure(argv, exc)) from None
    lines: asyncio.Task[None] | None = None
    if sink is not None and process.stderr is not None:
        lines = asyncio.ensure_future(_forward_lines(process.stderr, sink))
    try:
        handshake = await _read_handshake(process, start_timeout)
        if pair is not None and handshake.server_certificate is None:
            raise LaunchError(
                "the plugin did not answer automatic mutual TLS (no server certificate in its "
                "handshake line); launch it with auto_mtls=False to connect in plaintext"
            )
        context = None
        if pair is not None and handshake.server_certificate is not None:
            try:
                context = pinned_client_context(handshake.server_certificate, pair)
            except (ssl.SSLError, ValueError) as exc:
                raise LaunchError(
                    "bad handshake line: the server certificate (field 5; field 6 of "
                    f"go-plugin's layout) is not a DER X.509 certificate ({_reason(exc)})"
                ) from None
        client = ModelClient.connect(
            handshake.target,
            ssl=context,
            server_hostname=CERT_SAN_DNS if context is not None else None,
        )
    except BaseException:
        await _stop(process, 0)
        if lines is not None:
            await _finish(lines)
        raise
    assert process.stdout is not None
    drain = asyncio.ensure_future(_discard(process.stdout))
    plugin = LaunchedPlugin(
        process, handshake, client, pair is not None, stop_timeout, started_at, drain
    )
    try:
        yield plugin
    finally:
        await plugin.close()
        if lines is not None:
            await _finish(lines)


MAX_STDERR_LINE_BYTES: Final = 16 * 1024
"""Longest plugin stderr line handed to a ``stderr`` callable or logger, bytes; a longer one is
cut there."""


def _line_sink(
    stderr: int | IO[Any] | Callable[[str], None] | logging.Logger | None,
) -> Callable[[str], None] | None:
    """The per-line callable for a callable or Logger ``stderr``, else None (passed as is)."""
    if isinstance(stderr, logging.Logger):
        logger = stderr
        return lambda line: logger.info("plugin stderr: %s", line)
    if callable(stderr) and not isinstance(stderr, int) and not hasattr(stderr, "fileno"):
        return stderr
    return None


async def _forward_lines(stream: asyncio.StreamReader, sink: Callable[[str], None]) -> None:
    """Hand each line of ``stream`` to ``sink`` until end of file (overlong lines cut)."""
    while True:
        try:
            raw = await stream.readline()
        except (ValueError, asyncio.LimitOverrunError):
            raw = await stream.read(MAX_STDERR_LINE_BYTES)
        if not raw:
            return
        line = raw[:MAX_STDERR_LINE_BYTES].decode("utf-8", "replace").rstrip("\r\n")
        try:
            sink(line)
        except Exception as exc:
            log.error(
                "the stderr callable raised %s; plugin stderr lines are dropped from here",
                type(exc).__name__,
            )
            log.debug("the stderr callable's traceback", exc_info=exc)
            sink = _drop


def _drop(line: str) -> None:
    """Ignore ``line``."""


async def _finish(task: asyncio.Task[None]) -> None:
    """Let the stderr reader see end of file (1 s at most), then cancel it."""
    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(task), 1.0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _read_handshake(process: asyncio.subprocess.Process, timeout: float) -> Handshake:  # noqa: ASYNC109
    assert process.stdout is not None
    try:
        raw = await asyncio.wait_for(process.stdout.readline(), timeout)
    except TimeoutError:
        raise LaunchError(f"no handshake line from the plugin within {timeout:g} s") from None
    except (ValueError, asyncio.LimitOverrunError):
        raise LaunchError(
            f"the plugin's handshake line is longer than {MAX_HANDSHAKE_LINE_BYTES} bytes"
        ) from None
    if not raw.endswith(b"\n"):
        code = await _wait(process, 1.0)
        raise LaunchError(
            f"the plugin exited (status {code}) before printing its handshake line"
            if code is not None
            else "the plugin closed its stdout before printing its handshake line"
        )
    try:
        return parse_handshake_line(raw.decode("utf-8", "replace"))
    except ValueError as exc:
        raise LaunchError(f"bad handshake line: {exc}") from None


def _start_failure(argv: Sequence[str], exc: OSError) -> str:
    """Why the plugin command could not be started: the command (bounded) and the OS error
    (its errno name and text, never the unbounded file name the exception carries)."""
    command = quote_value(argv[0])
    name = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
    message = f"cannot start the plugin command {command}: {name}: {exc.strerror or exc}"
    if isinstance(exc, FileNotFoundError):
        message += (
            " (not found on PATH: activate the virtual environment that installed it, or pass"
            " its full path, e.g. [sys.executable, '-m', 'protocol_py.cli', ...])"
        )
    return bounded_message(message)


def _reason(exc: BaseException) -> str:
    """Why ``exc`` was raised, in at most 100 characters (library text, never the plugin's)."""
    reason = getattr(exc, "reason", None) or (exc.args[-1] if exc.args else None)
    return str(reason or type(exc).__name__)[:100]


async def _wait(process: asyncio.subprocess.Process, timeout: float) -> int | None:  # noqa: ASYNC109
    with contextlib.suppress(TimeoutError):
        return await asyncio.wait_for(process.wait(), timeout)
    return None


async def _stop(process: asyncio.subprocess.Process, timeout: float) -> None:  # noqa: ASYNC109
    """SIGTERM, wait ``timeout`` seconds, then SIGKILL and wait at most :data:`REAP_TIMEOUT`.

    The plugin's stdout pipe is closed first: asyncio's ``Process.wait`` also waits for every
    pipe to close, and a reader paused on unread output (a handshake line over the limit,
    output without a newline) never would, so the wait hung forever after the kill.
    """
    _close_stdout(process)
    if process.stdin is not None:
        if timeout > 0:  # an orderly close, not a failed start: say so before the end of file
            with contextlib.suppress(OSError, RuntimeError):
                process.stdin.write(ORDERLY_STOP)
        process.stdin.close()  # end of file: a plugin watching stdin starts shutting down
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate() if timeout > 0 else process.kill()
        if await _wait(process, timeout) is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            if await _wait(process, REAP_TIMEOUT) is None:
                log.warning("plugin process %d did not exit after SIGKILL", process.pid)


def _close_stdout(process: asyncio.subprocess.Process) -> None:
    """Close the read end of the plugin's stdout pipe (unread output is dropped)."""
    transport = getattr(process, "_transport", None)
    pipe = transport.get_pipe_transport(1) if transport is not None else None
    if pipe is not None:
        pipe.close()


async def _discard(stream: asyncio.StreamReader) -> None:
    """Read and drop a plugin's stdout after the handshake so it can never block on a full
    pipe (nothing is kept)."""
    with contextlib.suppress(Exception):
        while await stream.read(STDOUT_CHUNK):
            pass


__all__ = [
    "START_TIMEOUT",
    "STOP_TIMEOUT",
    "LaunchError",
    "LaunchedPlugin",
    "launch",
]
