"""MessageReader: grpclib's client stream buffer read in bulk gives exactly the
messages grpclib's ``recv_message`` gives, acknowledging data only as it takes it."""

from __future__ import annotations

import asyncio
import struct
from types import SimpleNamespace
from typing import Any

import pytest
from grpclib.events import _ident
from grpclib.protocol import Buffer
from grpclib.utils import Wrapper

from protocol_py.client.client import buffered_events
from protocol_py.client.message_reader import MAX_BATCH_BYTES, MessageReader
from protocol_py.codec import wire
from protocol_py_gen.model.v1 import StreamEvent, TextDelta, Usage


def _framed(events: list[StreamEvent]) -> bytes:
    out = b""
    for event in events:
        data = wire.encode(event)
        out += struct.pack(">?I", False, len(data)) + data
    return out


def _call(frames: list[bytes], *, eof: bool = True) -> tuple[Any, list[int]]:
    """A stand-in for grpclib's client Stream holding a real grpclib Buffer with ``frames``."""
    acks: list[int] = []
    buffer = Buffer(acks.append)
    for frame in frames:
        buffer.add(frame, len(frame))
    if eof:
        buffer.eof()
    connection = SimpleNamespace(messages_received=0, last_message_received=None)
    call = SimpleNamespace(
        _recv_initial_metadata_done=True,
        _wrapper=Wrapper(),
        _stream=SimpleNamespace(buffer=buffer, connection=connection),
        _codec=wire.WireCodec(),
        _recv_type=StreamEvent,
        _dispatch=SimpleNamespace(recv_message=_ident),
        _messages_received=0,
    )
    return call, acks


async def _read_all(reader: MessageReader) -> list[list[StreamEvent]]:
    batches = []
    while batch := await reader.batch():
        batches.append(batch)
    return batches


EVENTS = [StreamEvent(text_delta=TextDelta(text=f"tok{i} \u00e9")) for i in range(40)] + [
    StreamEvent(usage=Usage(input_tokens=10, output_tokens=40))
]


def test_every_split_of_the_frames_gives_the_same_messages_and_acks_everything() -> None:
    body = _framed(EVENTS)
    for cut in range(0, len(body) + 1, 7):
        for second in (cut, (cut + len(body)) // 2):
            frames = [body[:cut], body[cut:second], body[second:]]
            call, acks = _call(frames)
            reader = MessageReader(call)
            batches = asyncio.run(_read_all(reader))
            assert [e for b in batches for e in b] == EVENTS, (cut, second)
            assert sum(acks) == len(body)
            assert call._messages_received == len(EVENTS)
            assert call._stream.connection.messages_received == len(EVENTS)
            assert reader.leftover == b""


def test_frames_received_together_are_acknowledged_with_one_window_update() -> None:
    body = _framed(EVENTS)
    frames = [body[i : i + 100] for i in range(0, len(body), 100)]
    call, acks = _call(frames)
    batches = asyncio.run(_read_all(MessageReader(call)))
    assert len(batches) == 1
    assert acks == [len(body)]


def test_one_batch_takes_at_most_the_batch_bound_and_leaves_the_rest_unacknowledged() -> None:
    big = [StreamEvent(text_delta=TextDelta(text="x" * 1000)) for _ in range(600)]
    body = _framed(big)
    frames = [body[i : i + 16384] for i in range(0, len(body), 16384)]
    assert len(body) > 2 * MAX_BATCH_BYTES
    call, acks = _call(frames)
    reader = MessageReader(call)
    first = asyncio.run(reader.batch())
    assert MAX_BATCH_BYTES <= sum(acks) < MAX_BATCH_BYTES + 16384
    assert 0 < len(first) < len(big)
    assert first == big[: len(first)]


def test_partial_message_at_the_end_raises_and_is_kept_for_salvage() -> None:
    body = _framed(EVENTS)
    call, _ = _call([body[:-3]])
    reader = MessageReader(call)
    assert asyncio.run(reader.batch()) == EVENTS[:-1]
    with pytest.raises(AssertionError, match="Received less data than expected"):
        asyncio.run(reader.batch())
    assert reader.leftover == body[len(_framed(EVENTS[:-1])) : -3]


def test_salvage_reads_the_bytes_taken_then_the_buffer() -> None:
    body = _framed(EVENTS)
    split = len(_framed(EVENTS[:5])) + 2  # the reader holds a partial 6th message
    call, _ = _call([body[:split]], eof=False)
    reader = MessageReader(call)
    assert asyncio.run(reader.batch()) == EVENTS[:5]
    call._stream.buffer.add(body[split:], len(body) - split)
    assert buffered_events(call, reader.leftover) == EVENTS[5:]


def test_compressed_message_is_refused_as_grpclib_does() -> None:
    data = wire.encode(EVENTS[0])
    call, _ = _call([struct.pack(">?I", True, len(data)) + data])
    with pytest.raises(NotImplementedError, match="Compression not implemented"):
        asyncio.run(MessageReader(call).batch())
