"""Where each millisecond of one plugin turn goes, across the client, server and stub processes.

``time.monotonic()`` is one clock for every process on Linux (``CLOCK_MONOTONIC``), so stamps
taken in the client (this process), in the server and in the stub upstream (each spawned) line
up. The stamps are taken by wrapping functions in each process (nothing of the library is
changed for it); the server and the stub send theirs to this process after each turn.

Stamps, in the order of a turn:

* client: ``client.stream`` called; the codec's encode (start, end); grpclib's
  ``send_message`` (start, end: the request written to the socket buffer)
* server: the first and last ``data_received`` of the connection carrying request bytes (the
  time inside them: h2's parse of the DATA frames), the body whole (``receive_single``
  returned), the worker step (submitted on the loop, started and ended in the worker thread),
  inside it the decode, the validation and the context-window count (the translation to the
  vendor body and its JSON), the loop resuming after the step, the provider's ``stream``
  called, httpx's ``send`` (start; the response headers back)
* stub: the request head read, the body read whole
* server: the first event written (grpclib's ``send_message`` start, end)
* client: the first event received

Usage: ``.venv/bin/python benchmarks/turn_timeline.py [--messages 600] [--turns 9]``; also
printed by ``turn_latency.py``'s profile.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from server import start
from turn_latency import conversation, plugin_first_event, sse_reply

from protocol_py.client.client import ModelClient

_EPOCHS = itertools.count(20_000)
"""Message-id epochs of cold turns (unique in this process)."""

Stamps = list[tuple[str, float]]


def _wrap(owner: Any, name: str, stamps: Stamps, label: str) -> None:
    """Replace ``owner.name`` (a function) by one stamping ``label`` start and end."""
    original = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        stamps.append((f"{label} start", time.monotonic()))
        try:
            return original(*args, **kwargs)
        finally:
            stamps.append((f"{label} end", time.monotonic()))

    setattr(owner, name, wrapped)


def _wrap_async(owner: Any, name: str, stamps: Stamps, label: str) -> None:
    """Replace ``owner.name`` (a coroutine function) by one stamping ``label`` start and end."""
    original = getattr(owner, name)

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        stamps.append((f"{label} start", time.monotonic()))
        try:
            return await original(*args, **kwargs)
        finally:
            stamps.append((f"{label} end", time.monotonic()))

    setattr(owner, name, wrapped)


def _serve_stub_traced(port_queue: Any, trace_queue: Any) -> None:
    """:func:`turn_latency._serve_stub`, stamping the head and the body read; the stamps of
    each request go to ``trace_queue``."""
    reply = sse_reply()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                stamps = [("stub: head read", time.monotonic())]
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                await reader.readexactly(length)
                stamps.append(("stub: body read", time.monotonic()))
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    + f"content-length: {len(reply)}\r\n\r\n".encode()
                    + reply
                )
                await writer.drain()
                trace_queue.put(stamps)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port_queue.put(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(main())


def _serve_plugin_traced(port_queue: Any, stub_url: str, trace_queue: Any) -> None:
    """:func:`turn_latency._serve_plugin` with the server's stamps (see the module); each
    turn's go to ``trace_queue`` once its first event is written."""
    import grpclib.server  # noqa: PLC0415 (patched in this process only)
    import httpx  # noqa: PLC0415

    from protocol_py.providers.openai.provider import OpenAIProvider  # noqa: PLC0415
    from protocol_py.server import ModelServer, handlers, offload  # noqa: PLC0415
    from protocol_py.server.grpc_layer import connections  # noqa: PLC0415
    from protocol_py.server.serve import configure_serve_process  # noqa: PLC0415

    configure_serve_process()  # as turn_latency's plugin process
    logging.disable(logging.INFO)
    stamps: Stamps = []
    feeds: list[tuple[float, float]] = []  # (start, end) of each data_received

    original_feed = connections.TransportProtocol.data_received

    def data_received(self: Any, data: bytes) -> None:
        started = time.monotonic()
        try:
            original_feed(self, data)
        finally:
            if len(data) > 1024:  # request bytes, not a WINDOW_UPDATE or PING
                feeds.append((started, time.monotonic()))

    connections.TransportProtocol.data_received = data_received  # type: ignore[method-assign]
    _wrap_async(handlers, "receive_single", stamps, "server: receive_single")
    _wrap(handlers, "decode_request", stamps, "server: decode")
    _wrap(handlers, "validate_request", stamps, "server: validation")
    _wrap(handlers, "checked_request", stamps, "server: validation + count")
    _wrap_async(handlers.ModelServer, "_recv_completion", stamps, "server: read + step")
    original_submit = offload._Workers.submit

    def submit(self: Any, func: Callable[[], Any]) -> Any:
        stamps.append(("server: step submitted", time.monotonic()))

        def job() -> Any:
            stamps.append(("server: step started", time.monotonic()))
            try:
                return func()
            finally:
                stamps.append(("server: step ended", time.monotonic()))

        return original_submit(self, job)

    offload._Workers.submit = submit  # type: ignore[method-assign]
    _wrap_async(httpx.AsyncClient, "send", stamps, "server: httpx send")
    original_send = grpclib.server.Stream.send_message

    async def send_message(self: Any, message: Any, **kwargs: Any) -> None:
        first = bool(stamps)
        if first:
            stamps.append(("server: first event write start", time.monotonic()))
        await original_send(self, message, **kwargs)
        if first:
            stamps.append(("server: first event write end", time.monotonic()))
            body = [f for f in feeds if f[0] >= stamps[0][1] - 1.0]
            trace_queue.put([("feeds", body), *stamps])
            stamps.clear()
            feeds.clear()

    grpclib.server.Stream.send_message = send_message  # type: ignore[method-assign]

    async def main() -> None:
        provider = OpenAIProvider(api_key="bench", base_url=stub_url)
        original_stream = provider.stream

        def stream(request: Any, context: Any) -> AsyncIterator[Any]:
            stamps.append(("server: provider.stream called", time.monotonic()))
            return original_stream(request, context)

        provider.stream = stream  # type: ignore[method-assign]
        server = ModelServer(provider)
        port_queue.put(await server.start("127.0.0.1", 0))
        await asyncio.Event().wait()

    asyncio.run(main())


async def _traced_turns(
    port: int, messages: int, turns: int, *, cold: bool, server_q: Any, stub_q: Any
) -> list[dict[str, float]]:
    """``turns`` turns (after 3 warm-up ones), each as {stamp name: ms since the call}."""
    import grpclib.client  # noqa: PLC0415

    from protocol_py.codec import wire  # noqa: PLC0415

    stamps: Stamps = []
    encode = wire.WireCodec.encode
    send = grpclib.client.Stream.send_message

    def traced_encode(self: Any, message: Any, message_type: Any) -> bytes:
        stamps.append(("client: encode start", time.monotonic()))
        try:
            return encode(self, message, message_type)
        finally:
            stamps.append(("client: encode end", time.monotonic()))

    async def traced_send(self: Any, message: Any, **kwargs: Any) -> None:
        stamps.append(("client: send_message start", time.monotonic()))
        await send(self, message, **kwargs)
        stamps.append(("client: send_message end", time.monotonic()))

    wire.WireCodec.encode = traced_encode  # type: ignore[method-assign]
    grpclib.client.Stream.send_message = traced_send  # type: ignore[method-assign]
    client = ModelClient.connect(f"127.0.0.1:{port}")
    out: list[dict[str, float]] = []
    try:
        for i in range(turns + 3):
            request = conversation(messages, next(_EPOCHS) if cold else 0, turn=i)
            stamps.clear()
            started = time.monotonic()
            took = await plugin_first_event(client, request)
            done = started + took
            server = server_q.get(timeout=30)
            stub = stub_q.get(timeout=30)
            if i < 3:
                continue
            feeds = server[0][1]
            turn = {"client: stream called": 0.0}
            if feeds:
                turn["server: first request bytes read"] = (feeds[0][0] - started) * 1e3
                turn["server: last request bytes read"] = (feeds[-1][1] - started) * 1e3
                turn["(h2 parse of the request, sum)"] = sum(b - a for a, b in feeds) * 1e3
            seen: dict[str, int] = {}
            for name, at in [*stamps, *server[1:], *stub]:
                if at < started:  # the previous turn's (its request freed in a worker step)
                    continue
                seen[name] = seen.get(name, 0) + 1
                key = name if seen[name] == 1 else f"{name} #{seen[name]}"
                turn[key] = (at - started) * 1e3
            turn["client: first event received"] = (done - started) * 1e3
            out.append(turn)
    finally:
        client.close()
        wire.WireCodec.encode = encode  # type: ignore[method-assign]
        grpclib.client.Stream.send_message = send  # type: ignore[method-assign]
    return out


def timeline(messages: int, turns: int, cold: bool) -> dict[str, float]:
    """Median ms since the client's call of each stamp over ``turns`` turns of ``messages``
    messages after the first (warm, or every id new with ``cold``), server and stub spawned."""
    import multiprocessing  # noqa: PLC0415

    ctx = multiprocessing.get_context("spawn")
    stub_q, server_q = ctx.Queue(), ctx.Queue()
    stub, stub_port = start(_serve_stub_traced, stub_q)
    plugin, port = start(_serve_plugin_traced, f"http://127.0.0.1:{stub_port}", server_q)
    try:
        runs = asyncio.run(
            _traced_turns(port, messages, turns, cold=cold, server_q=server_q, stub_q=stub_q)
        )
    finally:
        for proc in (plugin, stub):
            proc.terminate()
            proc.join(5)
    names = [n for n in runs[0] if all(n in r for r in runs)]
    return {n: statistics.median(r[n] for r in runs) for n in names}


def print_timeline(messages: int, turns: int) -> None:
    """Print the warm and the cold timeline of a ``messages``-message turn: each stamp's
    median ms since the client's call, ordered by time, with the gap from the stamp before."""
    for mode in ("warm", "cold"):
        line = timeline(messages, turns, cold=mode == "cold")
        print(
            f"{mode} timeline, {messages + 1} messages (median of {turns} turns; ms since the "
            "client's call; +ms since the stamp above):"
        )
        previous = 0.0
        for name, at in sorted(line.items(), key=lambda kv: kv[1]):
            if name.startswith("("):
                continue
            print(f"{name:>44}: {at:8.2f}  +{at - previous:6.2f}")
            previous = at
        for name, took in line.items():
            if name.startswith("("):
                print(f"{name:>44}: {took:8.2f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=600, help="messages after the first")
    parser.add_argument("--turns", type=int, default=9, help="turns measured (median)")
    args = parser.parse_args(argv)
    print_timeline(args.messages, args.turns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
