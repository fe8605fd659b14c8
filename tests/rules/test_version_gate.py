"""What each side sends a peer of an older minor (protocol_py.rules.version_gate,
docs/decisions.md#d30)."""

from __future__ import annotations

import pytest

from protocol_py.rules.accumulate import accumulate
from protocol_py.rules.version_gate import EventGate, parse_protocol_version, request_for_plugin
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    VendorBlock,
    VendorData,
)
from protocol_py_gen.model.v1 import (
    CacheBreakpoint,
    Stop,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    TextDelta,
    Usage,
)

COMPACTION = VendorBlock(vendor="anthropic", block_type="compaction", data=b'{"type":"compaction"}')
SIG = VendorData(location="gemini.part.thought_signature", value=b"Ci8B")


def stream_1_2() -> list[StreamEvent]:
    """A 1.2 stream using every 1.2 stream form."""
    return [
        StreamEvent(text_delta=TextDelta(text="Hello", vendor_data=[SIG])),
        StreamEvent(vendor_block=COMPACTION),
        StreamEvent(text_delta=TextDelta(text=" again", new_block=True)),
        StreamEvent(text_delta=TextDelta(text="", vendor_data=[SIG], new_block=True)),
        StreamEvent(usage=Usage(input_tokens=3, output_tokens=2)),
        StreamEvent(stop=Stop(reason=StopReason.END_TURN)),
    ]


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("1.2", (1, 2)),
        ("1.10", (1, 10)),
        ("0.0", (0, 0)),
        (None, None),
        ("", None),
        ("1", None),
        ("1.2.0", None),
        ("01.2", None),
        ("1.02", None),
        ("v1.2", None),
        (" 1.2", None),
        ("1.2\n", None),
        ("1." + "9" * 10, None),
    ],
)
def test_parse_protocol_version(text: str | None, parsed: tuple[int, int] | None) -> None:
    assert parse_protocol_version(text) == parsed


@pytest.mark.parametrize("version", [None, "1.0", "1.1", "nonsense"])
def test_a_kernel_below_1_2_gets_no_vendor_block_and_no_empty_text_delta(
    version: str | None,
) -> None:
    gate = EventGate(version)
    sent = [event for event in stream_1_2() if gate.admits(event)]
    assert [e.text_delta.text for e in sent if e.text_delta is not None] == ["Hello", " again"]
    assert not any(e.vendor_block is not None for e in sent)
    assert gate.dropped == {"vendor_block": 1, "text_delta": 1}
    note = gate.dropped_note()
    stated = "absent" if version is None else repr(version)
    assert note == (
        "dropped 1 vendor_block, 1 text_delta event(s) that a kernel below protocol 1.2 cannot "
        f"read (vendor-only content; the request's kernel_protocol_version is {stated})"
    )
    # What the old kernel folds is still a correct answer: the same text, in one block (it
    # ignores new_block and vendor_data), and a valid stream for the 1.1 rules that remain.
    folded = accumulate(sent)
    assert [b.text.text for b in folded.message.content if b.text is not None] == [
        "Hello",
        " again",
    ]


@pytest.mark.parametrize("version", ["1.2", "1.3", "2.0"])
def test_a_kernel_of_1_2_or_later_gets_everything(version: str) -> None:
    gate = EventGate(version)
    events = stream_1_2()
    assert [gate.admits(event) for event in events] == [True] * len(events)
    assert gate.dropped == {} and gate.dropped_note() is None
    assert not gate.filters


def _request() -> StreamCompletionRequest:
    return StreamCompletionRequest(
        model_id="m",
        kernel_protocol_version="1.2",
        messages=[
            Message(role=Role.USER, id="u1", content=[ContentBlock(text=TextBlock(text="q"))]),
            Message(
                role=Role.ASSISTANT,
                id="a1",
                content=[ContentBlock(vendor_block=COMPACTION)],
                produced_by_model_id="claude-x",
                produced_by_provider="anthropic",
            ),
            Message(
                role=Role.ASSISTANT,
                id="a2",
                content=[
                    ContentBlock(text=TextBlock(text="before")),
                    ContentBlock(vendor_block=COMPACTION),
                    ContentBlock(text=TextBlock(text="after", vendor_data=[SIG])),
                ],
            ),
            Message(role=Role.USER, id="u2", content=[ContentBlock(text=TextBlock(text="next"))]),
        ],
        cache_breakpoints=[CacheBreakpoint(after_message_index=2, ttl_seconds=3600)],
    )


@pytest.mark.parametrize("version", ["1.0", "1.1", "garbage"])
def test_request_for_a_plugin_below_1_2_drops_vendor_blocks_and_keeps_positions(
    version: str,
) -> None:
    request = _request()
    before = bytes(request)
    sent, removed = request_for_plugin(request, version)
    assert removed == 2
    assert bytes(request) == before  # the caller's request is untouched
    assert [m.id for m in sent.messages] == ["u1", "a1", "a2", "u2"]
    assert sent.messages[0] is request.messages[0] and sent.messages[3] is request.messages[3]
    # a message left without blocks keeps one empty text block, its attribution kept
    assert sent.messages[1] == Message(
        role=Role.ASSISTANT,
        id="a1",
        content=[ContentBlock(text=TextBlock(text=""))],
        produced_by_model_id="claude-x",
        produced_by_provider="anthropic",
    )
    assert sent.messages[2].content == [
        ContentBlock(text=TextBlock(text="before")),
        ContentBlock(text=TextBlock(text="after", vendor_data=[SIG])),
    ]
    assert sent.kernel_protocol_version == "1.2"
    assert sent.cache_breakpoints == request.cache_breakpoints


@pytest.mark.parametrize("version", ["1.2", "1.9"])
def test_request_for_a_plugin_of_1_2_or_later_is_the_request_itself(version: str) -> None:
    request = _request()
    assert request_for_plugin(request, version) == (request, 0)
    assert request_for_plugin(request, version)[0] is request


def test_request_without_vendor_blocks_is_not_copied_for_an_old_plugin() -> None:
    request = _request()
    request.messages = [request.messages[0], request.messages[3]]
    sent, removed = request_for_plugin(request, "1.1")
    assert sent is request and removed == 0
