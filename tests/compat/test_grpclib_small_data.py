"""grpclib_small_data: small DATA frames queued on a stream are held as one chunk of up to
COALESCE_BYTES; the reader gets the same bytes in the same order, each frame acknowledged
(its flow-control size) when read, and the end of the stream as before."""

from __future__ import annotations

import asyncio

from grpclib.protocol import Buffer

from protocol_py._compat import grpclib_small_data
from protocol_py._compat.grpclib_small_data import COALESCE_BYTES


def test_install_is_idempotent() -> None:
    assert grpclib_small_data.install()
    assert grpclib_small_data.install()


async def test_small_frames_are_held_as_chunks_and_read_whole_with_their_acks() -> None:
    grpclib_small_data.install()
    acked: list[int] = []
    buffer = Buffer(acked.append)
    payload = bytes(range(256)) * 40  # 10,240 bytes, one per frame
    for byte in payload:
        buffer.add(bytes([byte]), 2)  # a flow-control size of 2: padding counted
    held = buffer._unacked.qsize()
    assert held == -(-len(payload) // COALESCE_BYTES)  # 3 chunks, not 10,240 frames
    big = b"B" * COALESCE_BYTES
    buffer.add(big, len(big))  # never merged
    buffer.add(b"tail", 4)  # after a large frame: a chunk of its own
    buffer.eof()
    assert buffer._unacked.qsize() == held + 3
    data = await buffer.read(len(payload) + len(big) + 4)
    assert data == payload + big + b"tail"
    assert sum(acked) == 2 * len(payload) + len(big) + 4
    assert await buffer.read(1) == b""  # the end of the stream, as before


async def test_a_frame_after_the_reader_took_the_queue_starts_a_new_chunk() -> None:
    grpclib_small_data.install()
    buffer = Buffer(lambda _: None)
    buffer.add(b"ab", 2)
    first = asyncio.ensure_future(buffer.read(2))
    await asyncio.sleep(0)
    assert first.done() and first.result() == b"ab"
    reading = asyncio.ensure_future(buffer.read(3))  # waits on an empty queue
    await asyncio.sleep(0)
    buffer.add(b"c", 1)  # the waiting reader is woken by this chunk
    buffer.add(b"de", 2)  # merged into it only if not yet taken
    buffer.eof()
    assert await reading == b"cde"
