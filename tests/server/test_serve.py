"""``protocol_py.serve`` / ``serve_async``: the same server, logging, signal handling, grace
period and handshake as ``protocol-py serve``, as one call; and the package-root public API."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import protocol_py
from protocol_py.client.client import ModelClient
from protocol_py.client.conversation import Conversation
from protocol_py.errors import InvalidValueError
from protocol_py.provider import Provider, ProviderError
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer
from protocol_py.server import serve as serving
from protocol_py.server.offload import SERVE_SWITCH_INTERVAL_S
from protocol_py_gen.model.v1 import Capabilities

from ..support.servers import make_request


class NoModels(ReferenceProvider):
    def capabilities(self) -> Capabilities:
        return Capabilities()


async def start_in_task(
    stop: asyncio.Event | None = None,
) -> tuple[ModelServer, asyncio.Task[None]]:
    """serve_async in a task (no signal handlers, logging untouched); returns once listening."""
    started: list[ModelServer] = []
    ready = asyncio.Event()

    def on_started(server: ModelServer) -> None:
        started.append(server)
        ready.set()

    task = asyncio.create_task(
        serving.serve_async(
            ReferenceProvider(),
            port=0,
            log_level=None,
            handle_signals=False,
            stop=stop,
            on_started=on_started,
        )
    )
    await asyncio.wait_for(ready.wait(), 30)
    return started[0], task


async def test_serve_async_serves_until_stop_then_drains() -> None:
    stop = asyncio.Event()
    server, task = await start_in_task(stop)
    async with ModelClient.connect(server.address) as client:
        done = await client.complete(make_request("Hello there"), timeout=30)
        assert done.stop is not None and done.error is None
        stop.set()
        await asyncio.wait_for(task, 30)
    assert server.draining and task.exception() is None


async def test_serve_async_refuses_invalid_capabilities_naming_the_rule() -> None:
    with pytest.raises(serving.ServeError) as info:
        await serving.serve_async(NoModels(), port=0, log_level=None, handle_signals=False)
    assert str(info.value).startswith("refusing to start: invalid capabilities")
    assert "models: capabilities.models.empty: a model provider MUST serve" in str(info.value)


async def test_serve_async_cancelled_shuts_down_at_once() -> None:
    server, task = await start_in_task()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)
    assert server.draining


@pytest.mark.parametrize("port", [-1, 65536, True, "80"])
async def test_serve_async_rejects_a_bad_port(port: object) -> None:
    with pytest.raises(InvalidValueError, match="invalid port") as info:
        await serving.serve_async(ReferenceProvider(), port=port, log_level=None)  # type: ignore[arg-type]
    assert info.value.rule == "serve.port"


def test_configure_logging_rejects_an_unknown_level() -> None:
    with pytest.raises(InvalidValueError, match="'loud': expected one of DEBUG, INFO") as info:
        serving.configure_logging("loud")
    assert info.value.path == "log_level"


def test_blocking_serve_prints_handshake_logs_rpcs_and_exits_on_sigint() -> None:
    script = textwrap.dedent(
        """
        from protocol_py import serve
        from protocol_py.providers.reference.provider import ReferenceProvider
        serve(ReferenceProvider(), port=0, handshake=True, grace_period=1)
        print("returned", flush=True)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-u", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("1|tcp|127.0.0.1:") and line.endswith("|grpc\n")

        async def call() -> str:
            async with ModelClient.connect(line.split("|")[2]) as client:
                return (await client.describe(timeout=10)).name

        assert asyncio.run(call()) == "reference"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out == "returned\n"
    assert "INFO protocol_py.server serving reference on 127.0.0.1:" in err
    assert "INFO protocol_py.server limits: memory budget " in err
    assert "(--memory-budget), at most " in err and "write timeout 30 s (--write-timeout)" in err
    assert any(line.startswith('{"rpc": "Describe"') for line in err.splitlines()), err
    assert "shutting down (draining)" in err and "stopped" in err


def test_the_limits_line_gives_each_bound_in_force_with_its_flag() -> None:
    server = ModelServer(ReferenceProvider(), memory_budget=3 * 2**30, max_connections=1234)
    server.write_timeout = 7.5
    assert serving.limits_line(server) == (
        "limits: memory budget 3,072 MiB (--memory-budget), at most 1,234 connections "
        "(--max-connections), write timeout 7.5 s (--write-timeout)"
    )
    assert serving.limits_line(ModelServer(ReferenceProvider(), memory_budget=0)).startswith(
        "limits: memory budget off (--memory-budget)"
    )


def test_bounds_past_what_the_machine_allows_give_one_warning_each() -> None:
    server = ModelServer(ReferenceProvider(), memory_budget=3 * 2**30, max_connections=1000)
    assert serving.limit_warnings(server, memory=4 * 2**30, soft_nofile=1128) == []
    assert serving.limit_warnings(server, memory=2 * 2**30, soft_nofile=1024) == [
        "--memory-budget of 3,072 MiB is more than this machine's memory (2,048 MiB): it will "
        "not bound the server's memory",
        "--max-connections 1,000 is more than the descriptor limit leaves room for (soft "
        "RLIMIT_NOFILE 1,024, less 128 kept for upstream connections and files): descriptors "
        "run out before the bound is reached",
    ]
    unbounded = ModelServer(ReferenceProvider(), memory_budget=0, max_connections=10)
    assert serving.limit_warnings(unbounded, memory=1, soft_nofile=1024) == []
    # 100 is the default for a soft limit of 200 (half of it, docs/decisions.md#d33): no warning
    default = ModelServer(ReferenceProvider(), max_connections=100)
    assert serving.limit_warnings(default, memory=2**40, soft_nofile=200) == []


def test_package_root_exports_a_typed_public_api() -> None:
    assert protocol_py.serve is serving.serve
    assert protocol_py.serve_async is serving.serve_async
    assert protocol_py.ModelServer is ModelServer
    assert protocol_py.Provider is Provider and protocol_py.ProviderError is ProviderError
    assert protocol_py.Conversation is Conversation
    for name in protocol_py.__all__:
        assert getattr(protocol_py, name) is not None, name
    assert set(protocol_py.__all__) <= set(dir(protocol_py))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = protocol_py.nope  # type: ignore[attr-defined]


def test_import_protocol_py_stays_cheap() -> None:
    code = (
        "import sys, protocol_py; print('grpclib' in sys.modules, 'protocol_py.cli' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert out == "False False\n"


def test_serve_sets_the_one_millisecond_switch_interval_before_starting_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ``serve`` (what ``protocol-py serve`` runs) lowers the process's thread switch interval
    # to 1 ms before the event loop starts (docs/decisions.md#d38). The interval seen inside
    # the (fake) asyncio.run is recorded, starting from CPython's 5 ms default.
    assert SERVE_SWITCH_INTERVAL_S == 0.001
    seen: list[float] = []
    monkeypatch.setattr(serving, "limit_malloc_arenas", lambda: True)
    monkeypatch.setattr(serving, "keep_freed_heap", lambda: True)

    def run(coro: object) -> None:
        seen.append(sys.getswitchinterval())
        coro.close()  # type: ignore[attr-defined]

    monkeypatch.setattr(serving.asyncio, "run", run)
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    try:
        serving.serve(ReferenceProvider())
    finally:
        sys.setswitchinterval(before)
    assert seen == [pytest.approx(0.001)]


def test_serve_stopped_with_a_call_that_never_ends_says_so() -> None:
    """A provider that catches every cancellation keeps its call (and the process) running
    after the shutdown (docs/decisions.md#d46): the last line says so, where it would say
    "stopped"."""
    script = textwrap.dedent(
        """
        import asyncio
        from protocol_py import serve
        from protocol_py.providers.reference.provider import ReferenceProvider
        from protocol_py.server import lifecycle

        lifecycle.CANCEL_REDELIVERY_S = 0.1

        class CatchesEvery(ReferenceProvider):
            async def stream(self, request, context):
                while True:
                    try:
                        await asyncio.sleep(3600)
                    except asyncio.CancelledError:
                        pass
                yield

        serve(CatchesEvery(), port=0, handshake=True, grace_period=0.2)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-u", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    guard = threading.Timer(30, proc.kill)  # the read of stderr below ends at the latest then
    try:
        assert proc.stdout is not None and proc.stderr is not None
        address = proc.stdout.readline().split("|")[2]

        async def call() -> None:
            async with ModelClient.connect(address) as client:
                with pytest.raises(asyncio.TimeoutError):
                    async for _ in client.stream(make_request(), timeout=0.3):
                        pass

        asyncio.run(call())
        proc.send_signal(signal.SIGTERM)
        lines = []
        guard.start()
        for line in proc.stderr:
            lines.append(line)
            if " protocol_py.server stopped" in line:
                break
        else:
            raise AssertionError("".join(lines))
    finally:
        guard.cancel()
        proc.kill()
        proc.communicate()
    last = lines[-1]
    assert "WARNING protocol_py.server stopped, but 1 call(s) still run: their provider" in last
    assert any("1 StreamCompletion call still ran 0.1 s or more" in line for line in lines)
