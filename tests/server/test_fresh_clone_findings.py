"""What a new user found trying the integration branch from a fresh clone with the README only
(round nu3): each test pins one fixed behaviour."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import StreamEnded

from protocol_py._compat.grpclib_goaway import GOAWAY_NO_ERROR, goaway_error_code
from protocol_py.cli.app import TABLE_WIDTH, _tier_place, capabilities_table
from protocol_py.client.client import ModelClient
from protocol_py.errors import InvalidValueError
from protocol_py.providers.reference.provider import CONFIG_SCHEMA, reference_models
from protocol_py.transport.launch import LaunchError, launch
from protocol_py_gen.model.v1 import ErrorKind, PricingTier, RenderRequest

from .conftest import CONSOLE_SCRIPT, REPO, Running, make_request, spawn_server

REFERENCE_DOC = (REPO / "docs" / "reference-provider.md").read_text()


async def test_launch_of_a_command_not_on_path_raises_launch_error_naming_it() -> None:
    """A raw ``FileNotFoundError`` traceback escaped from ``create_subprocess_exec``."""
    with pytest.raises(LaunchError) as caught:
        async with launch(["protocol-py-not-installed-here", "serve", "--handshake"]):
            pass
    message = str(caught.value)
    assert message.startswith(
        "cannot start the plugin command 'protocol-py-not-installed-here': "
        "ENOENT: No such file or directory (not found on PATH"
    )
    assert "sys.executable, '-m', 'protocol_py.cli.app'" in message


async def test_launch_of_a_non_executable_file_names_the_os_error() -> None:
    with pytest.raises(LaunchError, match=r"^cannot start the plugin command '/dev/null': EACCES"):
        async with launch(["/dev/null"]):
            pass


async def test_launch_echoes_an_overlong_command_bounded() -> None:
    with pytest.raises(LaunchError) as caught:
        async with launch(["x" * 100_000]):
            pass
    message = str(caught.value)
    print(f"overlong command refused with a {len(message)}-character message")
    assert "(100000 chars, cut)" in message and len(message) < 300


async def test_launch_with_the_interpreter_and_module_path_starts_the_plugin() -> None:
    """The README's alternative to PATH: ``[sys.executable, "-m", "protocol_py.cli.app", ...]``."""
    argv = [sys.executable, "-m", "protocol_py.cli.app", "serve", "--handshake"]
    async with launch(argv, stderr=subprocess.DEVNULL) as plugin:
        assert (await plugin.client.describe(timeout=10)).name == "reference"


async def test_client_error_contract_as_the_readme_states_it(running: Running) -> None:
    """README "Client": in-band errors return, a deadline raises TimeoutError, refused unary
    calls raise GRPCError, a wrong request type raises InvalidValueError."""
    async with ModelClient.connect(running.address) as client:
        done = await client.complete(make_request(model="no-such-model"), timeout=30)
        assert done.stop is None and done.error is not None
        assert done.error.kind == ErrorKind.INVALID_REQUEST
        with pytest.raises(GRPCError) as refused:
            await client.configure({"nope": 1}, timeout=30)
        assert refused.value.status == Status.INVALID_ARGUMENT
        with pytest.raises(GRPCError) as refused:
            await client.render(RenderRequest(payload_type="reference.nope", payload=b"{}"))
        assert refused.value.status == Status.INVALID_ARGUMENT
        with pytest.raises(InvalidValueError, match="expected a StreamCompletionRequest"):
            await client.complete("not a request", timeout=30)  # type: ignore[arg-type]
        await client.configure({"pace_tokens_per_second": 5}, timeout=30)
        with pytest.raises(TimeoutError):
            await client.complete(make_request(), timeout=0.3)
        assert (await client.describe(timeout=30)).name == "reference"  # still serving


# -- chat: a graceful GOAWAY is the server shutting down ------------------------------------------


def _h2_then_close(listener: socket.socket, done: threading.Event, goaway: bool) -> None:
    """Answer each connection's HTTP/2 preface, read its first request to its end of stream,
    then (``goaway``) send GOAWAY(NO_ERROR, last stream 0), what a server shutting down sends
    (RFC 9113 section 6.8), and hold the socket a moment; or close the connection at once."""
    listener.settimeout(0.2)
    while not done.is_set():
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        with conn:
            conn.settimeout(10)
            h2 = H2Connection(H2Configuration(client_side=False))
            h2.initiate_connection()
            conn.sendall(h2.data_to_send())
            asked = False
            while not asked:
                data = conn.recv(65536)
                if not data:
                    break
                asked = any(isinstance(e, StreamEnded) for e in h2.receive_data(data))
                conn.sendall(h2.data_to_send())
            if goaway:
                h2.close_connection(error_code=ErrorCodes.NO_ERROR, last_stream_id=0)
                conn.sendall(h2.data_to_send())
                done.wait(1.0)  # keep the socket open: the client reads the GOAWAY
            else:  # FIN, then read to the client's close: no reset from unread bytes
                conn.shutdown(socket.SHUT_WR)
                with contextlib.suppress(OSError):
                    while conn.recv(65536):
                        pass


@pytest.fixture
def shutting_down_server() -> Iterator[str]:
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()
    thread = threading.Thread(target=_h2_then_close, args=(listener, done, True))
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        thread.join(timeout=10)
        listener.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("command", [["chat", "hello"], ["describe"]])
def test_a_graceful_goaway_before_any_answer_says_the_server_is_shutting_down(
    shutting_down_server: str, command: list[str]
) -> None:
    """It said "connection ... lost: Received GOAWAY ... connect with --tls or --tls-ca"."""
    address = shutting_down_server
    done = _cli(command[0], "--server", address, *command[1:])
    assert done.returncode == 1  # as every transient connection failure (refused, lost)
    assert done.stderr == (
        f"protocol-py {command[0]}: connection to {address} closed: the server is shutting "
        "down (GOAWAY); retry when it is serving again\n"
    )
    assert done.stdout == ""


def test_goaway_error_code_reads_the_code_of_the_goaway_only() -> None:
    assert (
        goaway_error_code(
            StreamTerminatedError("Received GOAWAY frame, closing connection; error_code: 0")
        )
        == GOAWAY_NO_ERROR
    )
    assert (
        goaway_error_code(
            StreamTerminatedError("Received GOAWAY frame, closing connection; error_code: 2")
        )
        == 2
    )
    assert goaway_error_code(StreamTerminatedError("Connection lost")) is None


def test_a_server_shut_down_between_calls_is_a_connection_failure_without_tls_hint() -> None:
    """A real server answers one call and is shut down (SIGTERM); the next call fails with
    exit 1, as a GOAWAY does, naming the address, with no TLS hint (a refused connect)."""
    sub = spawn_server()
    try:
        assert _cli("describe", "--server", sub.address).returncode == 0
    finally:
        sub.proc.terminate()
        sub.proc.communicate(timeout=30)
    after = _cli("chat", "--server", sub.address, "hello")
    assert after.returncode == 1
    assert after.stderr.startswith(f"protocol-py chat: cannot connect to {sub.address}: ")
    assert "--tls" not in after.stderr


def test_a_unix_socket_closed_before_any_answer_gets_no_tls_hint(tmp_path: Path) -> None:
    """The TLS hint is for a TCP address; over a unix socket (a plaintext server that closes
    the connection after the request headers) the loss is reported without it."""
    path = tmp_path / "s.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()
    done = threading.Event()
    thread = threading.Thread(target=_h2_then_close, args=(listener, done, False))
    thread.start()
    try:
        lost = _cli("describe", "--server", f"unix:{path}")
    finally:
        done.set()
        thread.join(timeout=10)
        listener.close()
    assert lost.returncode == 1
    assert lost.stderr == f"protocol-py describe: connection to unix:{path} lost: Connection lost\n"


def test_a_tcp_connection_closed_before_any_answer_keeps_the_tls_hint() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()
    thread = threading.Thread(target=_h2_then_close, args=(listener, done, False))
    thread.start()
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    try:
        lost = _cli("describe", "--server", address)
    finally:
        done.set()
        thread.join(timeout=10)
        listener.close()
    assert lost.returncode == 1
    assert lost.stderr == (
        f"protocol-py describe: connection to {address} lost: Connection lost before any "
        "answer: if the server uses TLS, connect with --tls or --tls-ca\n"
    )


async def test_readme_simulate_error_kinds_and_repeat_payload_are_the_reference_providers(
    running: Running,
) -> None:
    """README "The built-in reference provider" lists every simulate_error.kind the Configure
    schema accepts, and its reference.repeat example renders as it says."""
    listed = REFERENCE_DOC.split("`kind` is the ErrorKind in\n  lowercase, one of ", 1)[1]
    listed = listed.split("; any other", 1)[0]
    kinds = [k.strip().strip("`") for k in listed.replace("\n", " ").split(",")]
    accepted = CONFIG_SCHEMA["properties"]["simulate_error"]["properties"]["kind"]["enum"]
    assert kinds == accepted
    async with ModelClient.connect(running.address) as client:
        for kind in kinds:
            await client.configure({"simulate_error": {"kind": kind}}, timeout=30)
        with pytest.raises(GRPCError, match="simulate_error"):
            await client.configure({"simulate_error": {"kind": "unspecified"}}, timeout=30)
        payload = json.dumps({"text": "ab", "times": 3}).encode()
        request = RenderRequest(payload_type="reference.repeat", payload=payload)
        assert (await client.render(request, timeout=30)).text == "ababab"


# -- capabilities: window count in the singular, the prompt-size range of a tier -----------------


def _medium_pricing_line(at: datetime) -> str:
    rows = capabilities_table(reference_models(), at=at)
    assert max(len(r) for r in rows) <= TABLE_WIDTH
    start = rows.index(next(r for r in rows if r.startswith("reference-medium"))) + 1
    text = []
    for row in rows[start:]:
        if not row.startswith(" "):
            break
        text.append(row.strip())
    return " ".join(text)


def test_capabilities_says_1_recurring_window_in_the_singular() -> None:
    """It said "outside its 1 recurring windows" (reference-medium: weekends at half price)."""
    tuesday = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    saturday = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    assert _medium_pricing_line(tuesday) == (
        "pricing (USD): now (tier 2 of 2, outside its 1 recurring window): $0.5 in / $2.5 out / "
        "$0.05 cache read per Mtok"
    )
    assert _medium_pricing_line(saturday).startswith(
        "pricing (USD): now (tier 2 of 2, window 1 of 1 recurring window): $0.25 in / $1.25 out"
    )


def test_capabilities_names_the_prompt_size_range_of_a_size_based_tier() -> None:
    """It said "(tier 1 of 2 now)" for reference-large, whose tiers split by prompt size."""
    rows = capabilities_table(reference_models())
    large = " ".join(" ".join(rows[3:5]).split())
    assert large == (
        "pricing (USD): $3 in / $15 out / $0.3 cache read per Mtok (tier 1 of 2: prompts below "
        "200,000 tokens)"
    )
    by_size = [
        PricingTier(input_tokens_until=200_000),
        PricingTier(input_tokens_from=200_000, input_tokens_until=1_000_000),
        PricingTier(input_tokens_from=1_000_000),
    ]
    assert _tier_place(by_size, 1) == "tier 2 of 3: prompts from 200,000 to below 1,000,000 tokens"
    assert _tier_place(by_size, 2) == "tier 3 of 3: prompts from 1,000,000 tokens"
    by_time = [
        PricingTier(effective_until="2026-07-01T00:00:00Z"),
        PricingTier(effective_from="2026-07-01T00:00:00Z"),
    ]
    assert _tier_place(by_time, 1) == "tier 2 of 2 now"
    assert _tier_place(by_time, 1, now=False) == "tier 2 of 2"
    assert _tier_place(by_size[:1], 0) == ""


# -- benchmarks/turn_latency.py: a noisy sample is said to be one ---------------------------------


def test_turn_latency_flags_an_overhead_that_does_not_grow_with_size() -> None:
    """Run in its own interpreter with ``benchmarks/`` first on ``sys.path``, as the script
    runs (it imports its sibling ``server``, which the tests' package of that name shadows)."""
    code = (
        "import sys; sys.path.insert(0, 'benchmarks'); import turn_latency as t\n"
        "s = [60, 300, 600]\n"
        "print(t.not_increasing({60: 6.2, 300: 13.1, 600: 27.1}, s))\n"
        "print(t.not_increasing({60: 6.2, 300: 13.1, 600: 11.0}, s))\n"
        "print(t.not_increasing({60: 9.0, 300: 8.0, 600: 27.1}, s))\n"
        "print(t.NOISY_WARNING)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    growing, shrinking, dip, warning = done.stdout.splitlines()
    assert (growing, shrinking, dip) == ("False", "True", "True")
    assert warning.startswith("warning: the overhead does not grow with the message count")
    assert "noisy (machine load)" in warning and "rerun" in warning
