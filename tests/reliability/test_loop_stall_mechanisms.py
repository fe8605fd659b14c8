"""The mechanisms that keep one large request from stalling the event loop.

Not timing assertions (``benchmarks/loop_stall.py`` measures the stall): each test pins one
mechanism and the same statuses and messages as before for every input:

* a large request body is assembled piece by piece as it arrives (no final join of all its
  frames), and a body cut short or holding invalid UTF-8 across a piece boundary is still
  refused with the same status and message;
* a large request is freed a bounded step at a time, and a request still shared is left alone;
* the CPU worker threads are all started before any job needs them;
* upb's strict check of a large body sees it with its large strings elided (their UTF-8
  checked a chunk at a time) and, after an exact fast decode, its large runs of small entries
  parsed apart in pieces (at their real depth, the job stoppable between pieces), and gives the
  same answer as on the whole body.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import weakref
from collections import deque
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol_py.codec import wire
from protocol_py.providers.reference import tokenizer as reference
from protocol_py.server import offload
from protocol_py.server.grpc_layer import limits as limits_module
from protocol_py.server.grpc_layer import strict_parse as strict_parse_module
from protocol_py.server.grpc_layer.connections import MemoryTrimmer
from protocol_py.server.grpc_layer.large_body import (
    ASSEMBLE_MIN_BYTES,
    RECEIVE_PIECE_BYTES,
    BytesBuilder,
    receive_body,
)
from protocol_py.server.grpc_layer.limits import MAX_FALLBACK_BYTES, decode_request, wrong_wire_type
from protocol_py.server.grpc_layer.strict_parse import STRICT_ELIDE_MIN_BYTES, strict_parse
from protocol_py.server.offload import MAX_CPU_JOBS, RELEASE_STEP_ITEMS, release_in_steps, run_cpu
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import StreamCompletionRequest, StreamEvent

from ._probes import upb_class
from .conftest import (
    Served,
    acall,
    fuzz_examples,
    fuzz_settings,
    mutated,
    raw_call,
    still_serving,
)

MIB = 1024 * 1024


def recorder(body: bytes) -> tuple[list[int], Any]:
    """A ``recv_data`` stand-in serving ``body``; the sizes asked for are recorded."""
    asked: list[int] = []
    at = [0]

    async def recv(size: int) -> bytes:
        asked.append(size)
        piece = body[at[0] : at[0] + size]
        at[0] += len(piece)
        return piece

    return asked, recv


async def test_large_body_is_read_in_bounded_pieces_and_assembled_into_one_bytes() -> None:
    body = bytes(range(256)) * ((ASSEMBLE_MIN_BYTES + 3 * MIB + 12345) // 256)
    asked, recv = recorder(body)
    data = await receive_body(recv, len(body))
    assert type(data) is bytes
    assert data == body
    assert max(asked) == RECEIVE_PIECE_BYTES
    assert sum(asked) == len(body)
    assert len(asked) == -(-len(body) // RECEIVE_PIECE_BYTES)


async def test_small_body_is_read_in_one_call() -> None:
    body = b"x" * (ASSEMBLE_MIN_BYTES - 1)
    asked, recv = recorder(body)
    assert await receive_body(recv, len(body)) == body
    assert asked == [len(body)]


async def test_large_body_cut_short_comes_back_empty() -> None:
    body = b"y" * (ASSEMBLE_MIN_BYTES + MIB // 2)
    _, recv = recorder(body[: 2 * MIB + 7])
    assert await receive_body(recv, len(body)) == b""


def _invalid_utf8_refusal(size: int) -> str:
    """The status message of a large StreamCompletion body of ``size`` bytes refused for
    invalid UTF-8 (past the fallback bound, so upb's own reason is not given)."""
    return (
        f"malformed request: StreamCompletionRequest could not be decoded ({size} bytes): "
        "not canonical well-formed protobuf (invalid UTF-8 in a string field); a body over "
        f"{MAX_FALLBACK_BYTES} bytes must be (bound MAX_FALLBACK_BYTES)"
    )


def test_bytes_builder_refuses_an_overflow_and_an_incomplete_take() -> None:
    builder = BytesBuilder(10)
    builder.write(b"0123456")
    with pytest.raises(ValueError, match="piece of 4 bytes at offset 7 exceeds the body's 10"):
        builder.write(b"789a")
    with pytest.raises(ValueError, match="body incomplete: 7 of 10 bytes written"):
        builder.take()
    builder.write(b"789")
    assert builder.take() == b"0123456789"
    with pytest.raises(ValueError, match="size: must be at least 1 byte, got 0"):
        BytesBuilder(0)


def large_request_body(text: str) -> bytes:
    """An encoded StreamCompletionRequest (upb) whose one user message holds ``text``."""
    request = upb_class("model.v1.StreamCompletionRequest")(model_id="reference-large")
    message = request.messages.add(role=1, id="01J" + "0" * 23)
    message.content.add().text.text = text
    request.call_context.session_id = "s"
    request.call_context.turn_id = "t"
    request.params.max_output_tokens = 8
    return bytes(request.SerializeToString())


def split_char_at_piece_boundary(body: bytes, char: bytes, bad: bytes) -> bytes:
    """``body`` with the two-byte ``char`` that straddles the first piece boundary (offset
    :data:`RECEIVE_PIECE_BYTES`) replaced by ``bad`` (same length)."""
    at = body.index(char, RECEIVE_PIECE_BYTES - 1)
    assert at == RECEIVE_PIECE_BYTES - 1  # its first byte ends one piece, its second starts one
    return body[:at] + bad + body[at + len(char) :]


def text_with_char_at_boundary(size: int) -> str:
    """ASCII text of ``size`` characters with one ``é`` whose encoding straddles the first
    piece boundary of the encoded request."""
    probe = large_request_body("a" * size)
    start = probe.index(b"a" * 64)  # where the text begins in the body
    before = RECEIVE_PIECE_BYTES - 1 - start
    return "a" * before + "é" + "a" * (size - before - 1)


async def test_invalid_utf8_across_a_piece_boundary_is_refused_as_before(
    served: Served,
) -> None:
    text = text_with_char_at_boundary(ASSEMBLE_MIN_BYTES + MIB)
    good = large_request_body(text)
    bad = split_char_at_piece_boundary(good, "é".encode(), b"\xc3\x28")  # invalid sequence
    assert len(bad) >= ASSEMBLE_MIN_BYTES
    strict = upb_class("model.v1.StreamCompletionRequest")
    with pytest.raises(Exception) as direct:  # the decode step alone, no transport
        decode_request(bad, StreamCompletionRequest, type(strict()))
    refused = await acall(served.address, "StreamCompletion", bad, stream=True, timeout=60)
    assert refused.code == "INVALID_ARGUMENT", refused
    assert refused.details == _invalid_utf8_refusal(len(bad))
    assert refused.details == str(getattr(direct.value, "message", direct.value))
    ok = await acall(served.address, "StreamCompletion", good, stream=True, timeout=60)
    assert ok.code == "OK", ok
    assert StreamEvent.parse(ok.replies[-1]).stop is not None
    await still_serving(served)


async def test_large_request_cut_short_is_refused_with_the_truncation_message(
    served: Served,
) -> None:
    body = large_request_body("b" * (ASSEMBLE_MIN_BYTES + MIB))
    # one DATA frame (at most 16 KiB), then END_STREAM
    cut = struct.pack(">?I", False, len(body)) + body[:16_000]
    reply = await raw_call(served.port, "StreamCompletion", cut)
    assert reply.grpc_status == "3", reply
    assert reply.grpc_message == (
        f"request message truncated: the length prefix announces {len(body)} bytes"
    )
    await still_serving(served)


class Holder:
    def __init__(self) -> None:
        self.items: list[Any] = []


class Tracked:
    """An item that logs, when freed, how many items its holder's list still had (-1 once the
    holder itself is gone)."""

    def __init__(self, log: deque[int], holder: Holder) -> None:
        self.log = log
        self.holder = weakref.ref(holder)

    def __del__(self) -> None:
        holder = self.holder()
        self.log.append(-1 if holder is None else len(holder.items))


def holder_of(count: int, log: deque[int]) -> Holder:
    holder = Holder()
    holder.items.extend(Tracked(log, holder) for _ in range(count))
    return holder


def test_large_request_is_freed_from_its_end_a_bounded_step_at_a_time() -> None:
    log: deque[int] = deque()  # not a list: the release looks at list attributes
    count = 5 * RELEASE_STEP_ITEMS + 17
    held: list[Any] = [holder_of(count, log)]
    release_in_steps(held)
    assert held == []
    assert len(log) == count  # everything was freed
    # each step freed RELEASE_STEP_ITEMS items while the rest were still held
    steps = [count - k * RELEASE_STEP_ITEMS for k in range(1, 6)] + [0]
    assert sorted(set(log), reverse=True) == steps
    assert log.count(steps[0]) == RELEASE_STEP_ITEMS
    assert log.count(0) == 17


def test_dropping_the_last_reference_frees_everything_in_one_cascade() -> None:
    """The contrast the test above relies on: a plain ``clear`` frees the holder first."""
    log: deque[int] = deque()  # not a list: the release looks at list attributes
    held: list[Any] = [holder_of(2 * RELEASE_STEP_ITEMS, log)]
    held.clear()
    assert set(log) == {-1}


@pytest.mark.parametrize("siblings", [0, RELEASE_STEP_ITEMS])
def test_nested_long_lists_are_freed_in_steps_too(siblings: int) -> None:
    """A long list inside an item of a short list (one message of many content blocks) or
    of a long one."""
    log: deque[int] = deque()
    inner = holder_of(3 * RELEASE_STEP_ITEMS, log)
    outer = Holder()
    outer.items.extend([inner] + [Holder() for _ in range(siblings)])
    held: list[Any] = [outer]
    del inner, outer
    release_in_steps(held)
    assert sorted(set(log), reverse=True) == [2 * RELEASE_STEP_ITEMS, RELEASE_STEP_ITEMS, 0]
    assert len(log) == 3 * RELEASE_STEP_ITEMS


def test_a_request_still_shared_is_left_unchanged() -> None:
    messages = [
        Message(role=Role.USER, id=f"01J{i:023d}", content=[ContentBlock(text=TextBlock(text="m"))])
        for i in range(2 * RELEASE_STEP_ITEMS + 1)
    ]
    request = StreamCompletionRequest(
        model_id="reference-large",
        messages=messages,
        call_context=CallContext(session_id="s", turn_id="t"),
    )
    release_in_steps([request])
    assert len(request.messages) == 2 * RELEASE_STEP_ITEMS + 1
    shared_list = Holder()
    shared_list.items = messages
    del messages
    keep = shared_list.items
    release_in_steps([shared_list])
    assert len(keep) == 2 * RELEASE_STEP_ITEMS + 1


async def test_every_cpu_worker_thread_is_started_before_a_job_needs_one() -> None:
    await run_cpu(offload.OFFLOAD_MIN_BYTES, sum, [1, 2, 3])
    names = [t.name for t in threading.enumerate() if t.name.startswith("protocol-py-cpu")]
    assert len(names) == MAX_CPU_JOBS, names
    assert await run_cpu(offload.OFFLOAD_MIN_BYTES, sum, [4, 5]) == 9


# -- the strict (upb) check of a large body with its large strings elided ----------------------


def seed_bodies() -> list[bytes]:
    """Valid StreamCompletionRequest encodings (upb) with long strings and bytes at several
    depths: a text block, an image, a tool result's text, a Struct string, a system prompt."""
    cls = upb_class("model.v1.StreamCompletionRequest")
    request = cls(model_id="reference-large")
    message = request.messages.add(role=1, id="01J" + "0" * 23)
    message.content.add().text.text = "long text é " * 8
    image = message.content.add().image
    image.media_type = "img/png"
    image.data = bytes(range(256))[:90]
    result = message.content.add().tool_result
    result.tool_use_id = "call-1"
    result.content.add().text.text = "résultat " * 9
    use = request.messages.add(role=2, id="01J" + "1" * 23).content.add().tool_use
    use.id, use.name = "call-1", "search"
    use.input.update({"query": "ü" * 60, "n": 3})
    request.call_context.session_id = "s"
    request.call_context.turn_id = "t"
    first = bytes(request.SerializeToString())
    request.messages.add(role=1, id="01J" + "2" * 23).content.add().text.text = "x" * 70
    return [first, bytes(request.SerializeToString())]


def outcome(parse: Any, data: bytes) -> tuple[str, str | None]:
    """What a parse gave: its error (type and text), or OK and the wrong-wire-type check."""
    try:
        parsed = parse(data)
    except Exception as exc:  # DecodeError
        return f"{type(exc).__name__}: {exc}", None
    return "OK", wrong_wire_type(parsed)


@pytest.fixture
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Elision from 64-byte bodies and 8-byte fields, UTF-8 checked 3 bytes at a time, so
    small examples take the large-body path (and split characters between chunks)."""
    monkeypatch.setattr(strict_parse_module, "STRICT_ELIDE_MIN_BYTES", 64)
    monkeypatch.setattr(strict_parse_module, "STRICT_ELIDE_FIELD_BYTES", 8)
    monkeypatch.setattr(strict_parse_module, "UTF8_CHECK_CHUNK_BYTES", 3)


STRICT = type(upb_class("model.v1.StreamCompletionRequest")())


@pytest.mark.usefixtures("small_thresholds")
@fuzz_settings(fuzz_examples(300))
@given(mutated(seed_bodies()))
def test_strict_check_with_elided_strings_gives_upbs_answer_for_every_body(data: bytes) -> None:
    assert outcome(lambda d: strict_parse(STRICT, d), data) == outcome(STRICT.FromString, data)


def _varint_of(value: int, extra: int = 0) -> bytes:
    """``value`` as a varint, ``extra`` bytes longer than its shortest form."""
    out = bytearray()
    while value >= 0x80 or extra:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
        if value == 0 and extra:
            extra -= 1
            if not extra:
                break
    out.append(value)
    return bytes(out)


def _fields_of(data: bytes) -> list[tuple[int, int, int, int]] | None:
    """(tag, start, payload start, end) of each field of ``data``; None if it does not scan."""
    found, pos = [], 0
    try:
        while pos < len(data):
            start = pos
            tag, pos = wire.varint(data, pos)
            kind = tag & 7
            if kind == 2:
                size, pos = wire.varint(data, pos)
                found.append((tag, start, pos, pos + size))
                pos += size
            elif kind == 0:
                _, pos = wire.varint(data, pos)
            elif kind in (1, 5):
                pos += 8 if kind == 1 else 4
            else:
                return None
    except Exception:
        return None
    return found if pos == len(data) else None


@st.composite
def overlong_varints(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """A seed body with one length-delimited field's tag or length (at any depth) written
    1 to 6 bytes longer than its shortest form (6 to 10 bytes is over upb's limit)."""

    def rewrite(data: bytes) -> bytes:
        fields = _fields_of(data)
        if not fields:
            return data
        tag, start, payload, end = draw(st.sampled_from(fields))
        inner = data[payload:end]
        if draw(st.booleans()) and _fields_of(inner):
            inner = rewrite(inner)  # deeper; this field's tag and length stay canonical
            head = _varint_of(tag) + _varint_of(len(inner))
        else:
            extra = draw(st.integers(1, 6))
            if draw(st.booleans()):
                head = _varint_of(tag, extra) + _varint_of(len(inner))
            else:
                head = _varint_of(tag) + _varint_of(len(inner), extra)
        return data[:start] + head + inner + data[end:]

    return rewrite(draw(st.sampled_from(seeds)))


def test_overlong_varint_helper_writes_longer_forms_of_the_same_value() -> None:
    assert _varint_of(10) == b"\x0a"
    assert _varint_of(10, 5) == b"\x8a\x80\x80\x80\x80\x00"
    assert wire.varint(_varint_of(300, 3), 0) == (300, 5)


@pytest.mark.usefixtures("small_thresholds")
@fuzz_settings(fuzz_examples(300))
@given(overlong_varints(seed_bodies()))
def test_strict_check_gives_upbs_answer_for_overlong_tags_and_lengths(data: bytes) -> None:
    assert outcome(lambda d: strict_parse(STRICT, d), data) == outcome(STRICT.FromString, data)


def test_a_9_mib_render_request_with_a_6_byte_tag_is_refused_as_upb_does() -> None:
    strict = type(upb_class("model.v1.RenderRequest")())
    text = b"a" * (9 * MIB)
    for head in (
        b"\x8a\x80\x80\x80\x80\x00" + _varint_of(len(text)),  # 6-byte tag
        b"\x0a" + _varint_of(len(text), 3),  # 7-byte length
    ):
        body = head + text
        assert len(body) >= STRICT_ELIDE_MIN_BYTES
        expected = outcome(strict.FromString, body)
        assert expected[0].startswith("DecodeError")
        assert outcome(lambda d: strict_parse(strict, d), body) == expected


async def test_server_refuses_a_9_mib_render_with_a_6_byte_tag(served: Served) -> None:
    body = b"\x8a\x80\x80\x80\x80\x00" + _varint_of(9 * MIB) + b"a" * (9 * MIB)
    refused = await acall(served.address, "Render", body, timeout=60)
    assert refused.code == "INVALID_ARGUMENT", refused
    assert refused.details.startswith(
        f"malformed request: RenderRequest could not be decoded ({len(body)} bytes)"
    )
    await still_serving(served)


@pytest.mark.usefixtures("small_thresholds")
def test_strict_check_elides_the_large_strings_and_bytes() -> None:
    body = seed_bodies()[1]
    parsed = strict_parse(STRICT, body)
    whole = STRICT.FromString(body)
    assert parsed.ByteSize() < whole.ByteSize()
    assert parsed.messages[0].content[0].text.text == ""
    assert parsed.messages[0].content[1].image.data == b""
    assert parsed.messages[0].content[1].image.media_type == "img/png"  # under 8 bytes: kept
    assert parsed.messages[1].content[0].tool_use.input["n"] == 3
    assert len(parsed.messages) == len(whole.messages) == 3


@pytest.mark.usefixtures("small_thresholds")
@pytest.mark.parametrize(
    ("bad", "what"),
    [
        (b"\xc3\x28 ", "invalid continuation byte"),
        (b"\xed\xa0\x80", "surrogate"),
        (b"\xc3  ", "truncated sequence"),
        (b"\xc0\xaf ", "overlong form"),
    ],
)
def test_invalid_utf8_in_an_elided_string_is_refused_with_upbs_error(bad: bytes, what: str) -> None:
    body = seed_bodies()[0]
    at = body.index("é ".encode())  # three bytes replaced by ``bad``
    broken = body[:at] + bad + body[at + len(bad) :]
    assert len(broken) == len(body), what
    expected = outcome(STRICT.FromString, broken)
    assert expected[0].startswith("DecodeError"), what
    assert outcome(lambda d: strict_parse(STRICT, d), broken) == expected


async def test_server_refuses_a_large_body_with_invalid_utf8_deep_inside(served: Served) -> None:
    text = "a" * (STRICT_ELIDE_MIN_BYTES + MIB)
    good = large_request_body(text)
    at = good.index(b"a" * 64) + len(text) // 2
    bad = good[:at] + b"\xff" + good[at + 1 :]
    refused = await acall(served.address, "StreamCompletion", bad, stream=True, timeout=60)
    assert refused.code == "INVALID_ARGUMENT", refused
    assert refused.details == _invalid_utf8_refusal(len(bad))
    await still_serving(served)


# -- large runs of small repeated entries, parsed apart in pieces -----------------------------


def run_seed_bodies() -> list[bytes]:
    """The seed bodies and two with runs of small map entries and repeated messages at several
    depths: provider options with many keys and a nested Struct of many keys in a list, many
    short messages, and a tool input of many keys."""
    cls = upb_class("model.v1.StreamCompletionRequest")
    request = cls(model_id="reference-large")
    request.provider_options.update({f"k{i:02d}": i for i in range(30)})
    request.provider_options["nested"] = [{f"n{i}": "v" for i in range(12)}, 1, "s"]
    for i in range(8):
        request.messages.add(role=1, id=f"01J{i:023d}").content.add().text.text = "m"
    use = request.messages.add(role=2, id="01J" + "9" * 23).content.add().tool_use
    use.id, use.name = "call-1", "search"
    use.input.update({f"q{i}": i for i in range(20)})
    request.call_context.session_id = "s"
    many = bytes(request.SerializeToString())
    request.provider_options["nested"][0]["deep"] = {"d": [{"e": 1}] * 6}
    return [*seed_bodies(), many, bytes(request.SerializeToString())]


@pytest.fixture
def small_runs(small_thresholds: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """As :func:`small_thresholds`, and messages walked from 32 bytes, runs from 24 bytes cut
    into pieces of about 16 bytes, so small examples have their runs parsed apart."""
    monkeypatch.setattr(strict_parse_module, "STRICT_WALK_FIELD_BYTES", 32)
    monkeypatch.setattr(strict_parse_module, "STRICT_RUN_MIN_BYTES", 24)
    monkeypatch.setattr(strict_parse_module, "STRICT_PIECE_BYTES", 16)


class RecordingStrict:
    """``STRICT`` with the size of every body handed to upb recorded."""

    DESCRIPTOR = STRICT.DESCRIPTOR

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def FromString(self, data: bytes) -> Any:  # noqa: N802 (upb's name)
        self.sizes.append(len(data))
        return STRICT.FromString(data)


def verdict(parse: Any, data: bytes) -> str:
    """A parse's error (type and text), or OK."""
    return outcome(parse, data)[0]


@pytest.mark.usefixtures("small_runs")
@fuzz_settings(fuzz_examples(300))
@given(mutated(run_seed_bodies()))
def test_strict_check_with_runs_apart_gives_upbs_answer_for_every_body(data: bytes) -> None:
    assert verdict(lambda d: strict_parse(STRICT, d, runs=True), data) == verdict(
        STRICT.FromString, data
    )


@pytest.mark.usefixtures("small_runs")
@fuzz_settings(fuzz_examples(200))
@given(overlong_varints(run_seed_bodies()))
def test_strict_check_with_runs_apart_gives_upbs_answer_for_overlong_tags(data: bytes) -> None:
    assert verdict(lambda d: strict_parse(STRICT, d, runs=True), data) == verdict(
        STRICT.FromString, data
    )


@pytest.mark.usefixtures("small_runs")
def test_strict_check_parses_large_runs_apart_in_pieces_only_when_asked() -> None:
    body = run_seed_bodies()[-2]
    strict = RecordingStrict()
    parsed = strict_parse(strict, body, runs=True)
    whole = STRICT.FromString(body)
    assert len(whole.provider_options.fields) == 31
    assert len(parsed.provider_options.fields) < 31  # the run of keys went to the pieces
    assert parsed.call_context.session_id == "s"  # short fields are kept
    assert len(strict.sizes) > 3  # the small body, then one parse per piece
    assert max(strict.sizes) < len(body) // 2
    without = strict_parse(STRICT, body)
    assert len(without.provider_options.fields) == 31  # no runs: every entry in upb's parse
    assert wrong_wire_type(without) == wrong_wire_type(whole)


def _nested_options(depth: int, keys: int) -> bytes:
    """A request whose provider options nest ``depth`` Struct levels, the deepest holding
    ``keys`` keys."""
    cls = upb_class("model.v1.StreamCompletionRequest")
    request = cls(model_id="m")
    inner = request.provider_options
    for _ in range(depth):
        inner = inner.get_or_create_struct("a")
    inner.update({f"k{i:03d}": i for i in range(keys)})
    return bytes(request.SerializeToString())


@pytest.mark.usefixtures("small_runs")
@pytest.mark.parametrize("depth", [29, 30, 31, 32, 33, 34])
def test_a_run_deep_inside_counts_its_real_nesting_depth(depth: int) -> None:
    body = _nested_options(depth, 40)
    expected = verdict(STRICT.FromString, body)
    strict = RecordingStrict()
    assert verdict(lambda d: strict_parse(strict, d, runs=True), body) == expected
    if expected == "OK":
        assert len(strict.sizes) > 2  # the deepest keys were parsed apart, and accepted


@pytest.mark.usefixtures("small_runs")
def test_deepest_accepted_run_is_parsed_apart_and_one_level_more_is_refused() -> None:
    verdicts = [verdict(STRICT.FromString, _nested_options(d, 40)) for d in range(28, 36)]
    assert "OK" in verdicts
    assert verdicts[-1].startswith("DecodeError")  # the bound is inside the range tested


@pytest.mark.usefixtures("small_runs")
def test_a_cancelled_worker_step_stops_between_pieces() -> None:
    body = run_seed_bodies()[-2]
    stop = threading.Event()
    stop.set()
    strict = RecordingStrict()
    with pytest.raises(offload.JobCancelled):
        offload._stoppable(stop, lambda: strict_parse(strict, body, runs=True))
    assert len(strict.sizes) == 1  # the small body only: no piece was parsed


def test_decode_request_parses_runs_apart_only_after_an_exact_decode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[bool] = []
    real = limits_module.strict_parse

    def parse(strict: Any, data: bytes, *, runs: bool = False) -> Any:
        asked.append(runs)
        return real(strict, data, runs=runs)

    monkeypatch.setattr(limits_module, "strict_parse", parse)
    body = run_seed_bodies()[-2]
    decode_request(body, StreamCompletionRequest, STRICT)
    unknown = body + b"\xf8\x3f\x01"  # an unknown field 1023: a decode that is not exact
    decode_request(unknown, StreamCompletionRequest, STRICT)
    assert asked == [True, False]


# -- the reference provider's case-insensitive prompt checks, a chunk at a time ---------------


@pytest.mark.parametrize("offset", [0, -9, -5, -1, 1])
def test_pause_turn_is_found_across_a_lowering_chunk_boundary(offset: int) -> None:
    chunk = reference.TOKEN_COUNT_CHUNK_CHARS
    at = 2 * chunk + offset
    text = "x" * at + "PAUSE Turn" + "y" * (chunk + 3)
    assert reference._contains_lowered(text, "pause turn") is True
    assert reference._contains_lowered(text.replace("Turn", "Tur n"), "pause turn") is False


def test_lowering_a_chunk_at_a_time_agrees_with_lowering_the_whole_text() -> None:
    chunk = reference.TOKEN_COUNT_CHUNK_CHARS
    # characters whose lower case is longer (İ) or depends on context (final Σ)
    text = ("ΣΣ " + "İ" * 7 + " pause") * (chunk // 8) + " SIGNED TOOL"
    for needle in ("pause turn", "signed tool", "i̇i̇", "σς"):
        assert reference._contains_lowered(text, needle) == (needle in text.lower()), needle


async def test_memory_trim_runs_on_a_started_worker_thread_not_a_new_one() -> None:
    ran: list[str] = []
    trimmer = MemoryTrimmer()
    trimmer._trim = lambda pad: ran.append(threading.current_thread().name) or 0
    await run_cpu(offload.OFFLOAD_MIN_BYTES, int)  # the pool is started
    before = {t.ident for t in threading.enumerate()}
    trimmer._run(asyncio.get_running_loop())
    for _ in range(200):
        if ran:
            break
        await asyncio.sleep(0.01)
    assert ran and ran[0].startswith("protocol-py-cpu"), ran
    assert {t.ident for t in threading.enumerate()} <= before  # no thread was started
