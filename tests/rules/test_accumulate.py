"""Unit and property tests of protocol_py.rules.accumulate."""

from __future__ import annotations

import itertools
import random

import pytest
from ulid import ULID

from protocol_py.codec.structs import from_struct
from protocol_py.errors import StreamOrderError
from protocol_py.rules.accumulate import StreamAccumulator, accumulate
from protocol_py.rules.stream_order import StreamOrderChecker
from protocol_py_gen.content.v1 import Role
from protocol_py_gen.model.v1 import (
    ErrorKind,
    ModelError,
    SafetyKind,
    SafetyNotice,
    Stop,
    StopReason,
    StreamEvent,
    StreamMetadata,
    TextDelta,
    ThinkingDelta,
    ThinkingSignature,
    ToolCallDelta,
    ToolCallDone,
    ToolCallStart,
    Usage,
)


def text(t: str) -> StreamEvent:
    return StreamEvent(text_delta=TextDelta(text=t))


def think(t: str) -> StreamEvent:
    return StreamEvent(thinking_delta=ThinkingDelta(text=t))


def sign(s: bytes) -> StreamEvent:
    return StreamEvent(thinking_signature=ThinkingSignature(signature=s))


def start(i: str, name: str = "f") -> StreamEvent:
    return StreamEvent(tool_call_start=ToolCallStart(id=i, name=name))


def frag(i: str, f: str) -> StreamEvent:
    return StreamEvent(tool_call_delta=ToolCallDelta(id=i, arguments_fragment=f))


def done(i: str) -> StreamEvent:
    return StreamEvent(tool_call_done=ToolCallDone(id=i))


END = StreamEvent(stop=Stop(reason=StopReason.END_TURN))


def test_message_identity_and_attribution() -> None:
    acc = StreamAccumulator(produced_by_model_id="claude-x", produced_by_provider="anthropic")
    acc.feed(text("hi"))
    acc.feed(END)
    message = acc.result().message
    assert message.role == Role.ASSISTANT
    ULID.from_str(message.id)
    assert (message.produced_by_model_id, message.produced_by_provider) == ("claude-x", "anthropic")
    assert acc.result().message.id == message.id  # stable across calls
    other = accumulate([text("hi"), END])
    assert other.message.id != message.id
    assert other.message.produced_by_model_id is None
    assert accumulate([END], message_id="m1").message.id == "m1"


def test_rejected_event_leaves_state_unchanged() -> None:
    acc = StreamAccumulator()
    acc.feed(text("a"))
    with pytest.raises(StreamOrderError) as info:
        acc.feed(StreamEvent(text_delta=TextDelta(text="")))
    assert (info.value.index, info.value.rule) == (1, "stream.text_delta.empty")
    with pytest.raises(StreamOrderError) as info:
        acc.feed(frag("ghost", "{}"))
    assert info.value.index == 2
    acc.feed(text("b"))
    acc.feed(END)
    result = acc.result()
    assert [b.text.text for b in result.message.content if b.text] == ["ab"]
    assert result.complete


@pytest.mark.parametrize("bad", [None, "text", {"text_delta": {"text": "x"}}, StreamEvent()])
def test_non_events_raise_stream_order_error(bad: object) -> None:
    with pytest.raises(StreamOrderError) as info:
        accumulate([bad])  # type: ignore[list-item]
    assert info.value.rule == "stream.event.empty"
    assert info.value.index == 0


def test_error_message_names_index_and_rule() -> None:
    with pytest.raises(StreamOrderError) as info:
        accumulate([text("a"), END, text("b")])
    assert str(info.value).startswith("event 2: stream.order.after_terminal:")


def test_checker_state() -> None:
    checker = StreamOrderChecker()
    checker.check(start("b"))
    checker.check(start("a"))
    assert checker.open_tool_calls == ["a", "b"]
    checker.check(done("a"))
    assert checker.open_tool_calls == ["b"]
    assert not checker.terminated
    checker.check(StreamEvent(error=ModelError(kind=ErrorKind.TRANSIENT, message="cut")))
    assert checker.terminated
    assert checker.index == 4


def test_error_with_unknown_kind() -> None:
    with pytest.raises(StreamOrderError) as info:
        accumulate([StreamEvent(error=ModelError(kind=77))])  # type: ignore[arg-type]
    assert info.value.rule == "stream.error.kind_unknown"


def test_failed_stream_may_leave_tool_calls_open() -> None:
    result = accumulate(
        [start("a"), frag("a", '{"x"'), StreamEvent(error=ModelError(kind=ErrorKind.OVERLOADED))]
    )
    assert result.complete
    assert result.open_tool_calls == ["a"]
    assert result.tool_arguments == {"a": '{"x"'}
    block = result.message.content[0].tool_use
    assert block is not None
    assert from_struct(block.input) == {}


def test_tool_argument_errors_name_the_call() -> None:
    result = accumulate([start("call_7", "lookup"), frag("call_7", "{oops"), done("call_7"), END])
    assert list(result.tool_call_errors) == ["call_7"]
    assert "call_7" in result.tool_call_errors["call_7"]
    assert "lookup" in result.tool_call_errors["call_7"]
    assert result.tool_arguments["call_7"] == "{oops"


def test_metadata_merge_and_safety_notices() -> None:
    result = accumulate(
        [
            StreamEvent(metadata=StreamMetadata(actual_model="a", live_context_window=100)),
            think("x"),
            StreamEvent(safety_notice=SafetyNotice(kind=SafetyKind.MODERATION)),
            StreamEvent(metadata=StreamMetadata(live_context_window=200, attrs={"k": "v"})),
            think("y"),
            StreamEvent(safety_notice=SafetyNotice(kind=99)),  # type: ignore[arg-type]
            sign(b"s"),
            END,
        ]
    )
    assert result.metadata == StreamMetadata(
        actual_model="a", live_context_window=200, attrs={"k": "v"}
    )
    assert [n.kind for n in result.safety_notices] == [SafetyKind.MODERATION]
    assert result.ignored_safety_notices == 1
    (block,) = result.message.content
    assert block.thinking is not None
    assert (block.thinking.text, block.thinking.signature) == ("xy", b"s")


def test_signature_bytes_are_kept_verbatim() -> None:
    raw = b"EqQBCkYIBxgCKkB\x00\xff not utf-8 == "
    result = accumulate([think("t"), sign(raw), END])
    block = result.message.content[0].thinking
    assert block is not None
    assert block.signature == raw


def test_many_deltas_make_one_block() -> None:
    pieces = [f"{i}," for i in range(20000)]
    result = accumulate([*(text(p) for p in pieces), END])
    (block,) = result.message.content
    assert block.text is not None
    assert block.text.text == "".join(pieces)


def _random_stream(rng: random.Random) -> tuple[list[StreamEvent], list[str], list[str], list[str]]:
    """A random valid stream, with the texts, thinking texts and tool ids it should yield."""
    events: list[StreamEvent] = []
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[str] = []
    open_calls: list[str] = []
    for n in range(rng.randint(0, 40)):
        kind = rng.choice(["text", "think", "sign", "start", "frag", "done", "meta"])
        if kind == "text":
            texts.append(f"t{n}")
            events.append(text(f"t{n}"))
        elif kind == "think":
            thoughts.append(f"h{n}")
            events.append(think(f"h{n}"))
        elif kind == "sign":
            events.append(sign(b"sig%d" % n))
        elif kind == "start":
            calls.append(f"c{n}")
            open_calls.append(f"c{n}")
            events.append(start(f"c{n}"))
        elif kind == "frag" and open_calls:
            events.append(frag(rng.choice(open_calls), " "))
        elif kind == "done" and open_calls:
            events.append(done(open_calls.pop(rng.randrange(len(open_calls)))))
        elif kind == "meta":
            events.append(StreamEvent(metadata=StreamMetadata(attrs={"n": str(n)})))
    events.extend(done(c) for c in open_calls)
    events.append(StreamEvent(usage=Usage(input_tokens=1, output_tokens=2)))
    events.append(
        StreamEvent(stop=Stop(reason=StopReason.TOOL_USE if calls else StopReason.END_TURN))
    )
    return events, texts, thoughts, calls


@pytest.mark.parametrize("seed", range(60))
def test_random_valid_streams_fold_losslessly(seed: int) -> None:
    events, texts, thoughts, calls = _random_stream(random.Random(seed))
    result = accumulate(events)
    blocks = result.message.content
    assert "".join(b.text.text for b in blocks if b.text) == "".join(texts)
    assert "".join(b.thinking.text for b in blocks if b.thinking) == "".join(thoughts)
    assert [b.tool_use.id for b in blocks if b.tool_use] == calls
    assert result.tool_call_errors == {}
    assert result.complete
    # No two text blocks are adjacent: consecutive deltas were merged.
    for a, b in itertools.pairwise(blocks):
        assert not (a.text is not None and b.text is not None)
    assert result.unreplayable_blocks == [
        i for i, b in enumerate(blocks) if b.thinking is not None and not b.thinking.signature
    ]


def test_event_with_two_oneof_members_is_an_order_error() -> None:
    event = StreamEvent(text_delta=TextDelta(text="a"))
    event.stop = Stop(reason=StopReason.END_TURN)  # betterproto2 keeps both members set
    with pytest.raises(StreamOrderError) as info:
        accumulate([text("x"), event])
    assert (info.value.index, info.value.rule) == (1, "stream.event.multiple")
