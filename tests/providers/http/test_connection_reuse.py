"""A finished upstream stream hands its connection back to httpx's pool: the rest of its body
(``data: [DONE]``, the end of the body) is read after the last event, so the next turn reuses
the connection instead of opening one (a TCP and a TLS handshake per turn). An upstream that
keeps the body open after its last event has that connection closed, as before, and the next
turn opens a new one."""

from __future__ import annotations

import asyncio
import json

from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import StreamEvent

from ...support.servers import make_request

MODEL = "gpt-6-sol"


def _reply() -> bytes:
    head = {"id": "c", "object": "chat.completion.chunk", "model": MODEL}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**head, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
    ]
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)


class Upstream:
    """A Chat Completions stub counting its connections; ``hold``: after the events and
    ``[DONE]``, the chunked body is left open (its last chunk never sent)."""

    def __init__(self, *, hold: bool = False) -> None:
        self.hold = hold
        self.connections = 0
        self.requests = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                await reader.readexactly(length)
                self.requests += 1
                body = _reply() + b"data: [DONE]\n\n"
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                    + f"{len(body):x}\r\n".encode()
                    + body
                    + b"\r\n"
                    + (b"" if self.hold else b"0\r\n\r\n")
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _turns(upstream: Upstream, turns: int) -> list[list[StreamEvent]]:
    server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    provider = OpenAIProvider(api_key="k", base_url=f"http://127.0.0.1:{port}")
    out = []
    try:
        for turn in range(turns):
            request = make_request(f"turn {turn}", model=MODEL)
            context = CallContext(session_id="s", turn_id=f"t{turn}")
            out.append([event async for event in provider.stream(request, context)])
    finally:
        await provider.aclose()
        server.close()
    return out


async def test_turns_reuse_one_upstream_connection() -> None:
    upstream = Upstream()
    streams = await _turns(upstream, 3)
    for events in streams:
        assert events[-1].stop is not None
        assert "".join(e.text_delta.text for e in events if e.text_delta is not None) == "Hi"
    assert (upstream.requests, upstream.connections) == (3, 1)


async def test_a_body_left_open_after_the_last_event_closes_its_connection() -> None:
    upstream = Upstream(hold=True)
    streams = await _turns(upstream, 2)
    assert [events[-1].stop is not None for events in streams] == [True, True]
    assert (upstream.requests, upstream.connections) == (2, 2)  # still serving: a new one
