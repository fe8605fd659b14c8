"""Vendor-owned blocks and vendor data on text in a stream (protocol 1.2): the order rules of
protocol_py.rules.accumulate.StreamOrderChecker and how StreamAccumulator folds them."""

from __future__ import annotations

import betterproto2
import pytest

from protocol_py.errors import StreamOrderError
from protocol_py.rules.accumulate import accumulate
from protocol_py.rules.stream_order import StreamOrderChecker
from protocol_py.rules.vendor_block import MAX_DATA_BYTES
from protocol_py.rules.vendor_data import (
    ANTHROPIC_TEXT_CITATIONS,
    GEMINI_PART_THOUGHT_SIGNATURE,
    MAX_ENTRIES,
)
from protocol_py_gen.content.v1 import ContentBlock, TextBlock, VendorBlock, VendorData
from protocol_py_gen.model.v1 import (
    Stop,
    StopReason,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ThinkingSignature,
    ToolCallDelta,
    ToolCallDone,
    ToolCallStart,
    Usage,
)

SEARCH_USE = (
    b'{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"q"}}'
)
SEARCH_RESULT = (
    b'{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":'
    b'[{"type":"web_search_result","url":"https://example.com/","title":"E",'
    b'"encrypted_content":"EqgfCioIARgBIiQ3","page_age":null}]}'
)
END = StreamEvent(stop=Stop(reason=StopReason.END_TURN))


def text(t: str, *entries: VendorData, new_block: bool = False) -> StreamEvent:
    return StreamEvent(text_delta=TextDelta(text=t, vendor_data=list(entries), new_block=new_block))


def vendor(block_type: str, data: bytes, family: str = "anthropic") -> StreamEvent:
    return StreamEvent(vendor_block=VendorBlock(vendor=family, block_type=block_type, data=data))


def sig(value: bytes) -> VendorData:
    return VendorData(location=GEMINI_PART_THOUGHT_SIGNATURE, value=value)


def kind(block: ContentBlock) -> str:
    return betterproto2.which_one_of(block, "block")[0]


def texts(blocks: list[ContentBlock]) -> list[tuple[str, list[tuple[str, bytes]]]]:
    out = []
    for block in blocks:
        assert block.text is not None, block
        out.append((block.text.text, [(v.location, v.value) for v in block.text.vendor_data]))
    return out


def rule_of(events: list[StreamEvent]) -> tuple[int, str, str]:
    checker = StreamOrderChecker()
    with pytest.raises(StreamOrderError) as caught:
        for event in events:
            checker.check(event)
    return caught.value.index, caught.value.rule, caught.value.detail


# -- vendor blocks -----------------------------------------------------------------------------


def test_vendor_blocks_are_kept_verbatim_at_their_position_and_close_the_text_block() -> None:
    folded = accumulate(
        [
            text("Let me search. "),
            vendor("server_tool_use", SEARCH_USE),
            vendor("web_search_tool_result", SEARCH_RESULT),
            text("Found "),
            text("it."),
            StreamEvent(usage=Usage(input_tokens=10, output_tokens=5)),
            END,
        ]
    )
    kinds = [kind(b) for b in folded.message.content]
    assert kinds == ["text", "vendor_block", "vendor_block", "text"]
    first, use, result, last = folded.message.content
    assert first.text == TextBlock(text="Let me search. ")
    assert use.vendor_block == VendorBlock(
        vendor="anthropic", block_type="server_tool_use", data=SEARCH_USE
    )
    assert result.vendor_block is not None and result.vendor_block.data == SEARCH_RESULT
    assert last.text == TextBlock(text="Found it.")  # a new text block after the vendor block


def test_vendor_block_closes_a_thinking_block_and_may_arrive_while_a_tool_call_is_open() -> None:
    folded = accumulate(
        [
            StreamEvent(thinking_delta=ThinkingDelta(text="plan")),
            vendor("compaction", b'{"type":"compaction","content":"summary"}'),
            StreamEvent(thinking_delta=ThinkingDelta(text="more")),
            StreamEvent(thinking_signature=ThinkingSignature(signature=b"s1")),
            StreamEvent(tool_call_start=ToolCallStart(id="t1", name="f")),
            vendor("server_tool_use", SEARCH_USE),
            StreamEvent(tool_call_delta=ToolCallDelta(id="t1", arguments_fragment='{"a":1}')),
            StreamEvent(tool_call_done=ToolCallDone(id="t1")),
            StreamEvent(stop=Stop(reason=StopReason.TOOL_USE)),
        ]
    )
    kinds = [kind(b) for b in folded.message.content]
    assert kinds == ["thinking", "vendor_block", "thinking", "tool_use", "vendor_block"]
    assert folded.message.content[0].thinking is not None
    assert folded.message.content[0].thinking.signature == b""  # closed unsigned by the block
    assert folded.unreplayable_blocks == [0]
    assert folded.message.content[2].thinking is not None
    assert folded.message.content[2].thinking.signature == b"s1"
    tool_use = folded.message.content[3].tool_use
    assert tool_use is not None and tool_use.id == "t1" and tool_use.input is not None


@pytest.mark.parametrize(
    ("block", "rule", "detail"),
    [
        (
            VendorBlock(vendor="", block_type="compaction", data=b"{}"),
            "stream.vendor_block.vendor_empty",
            "vendor_block.vendor: vendor is empty",
        ),
        (
            VendorBlock(vendor="Anthropic", block_type="compaction", data=b"{}"),
            "stream.vendor_block.vendor_invalid",
            "vendor_block.vendor: vendor 'Anthropic' must be at most 64 bytes of [a-z0-9_]",
        ),
        (
            VendorBlock(vendor="a" * 65, block_type="compaction", data=b"{}"),
            "stream.vendor_block.vendor_invalid",
            "vendor_block.vendor: vendor 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'... "
            "(65 characters) must be at most 64 bytes of [a-z0-9_]",
        ),
        (
            VendorBlock(vendor="anthropic", block_type="", data=b"{}"),
            "stream.vendor_block.block_type_empty",
            "vendor_block.block_type: block_type is empty",
        ),
        (
            VendorBlock(vendor="anthropic", block_type="web search", data=b"{}"),
            "stream.vendor_block.block_type_invalid",
            "vendor_block.block_type: block_type 'web search' must be at most 128 bytes of "
            "[A-Za-z0-9_.-]",
        ),
        (
            VendorBlock(vendor="anthropic", block_type="compaction", data=b""),
            "stream.vendor_block.data_empty",
            "vendor_block.data: data is empty",
        ),
        (
            VendorBlock(vendor="anthropic", block_type="compaction", data=b'["x"]'),
            "stream.vendor_block.data_not_object",
            "vendor_block.data: data must be the JSON text of an object (starting with '{' and "
            "ending with '}')",
        ),
    ],
)
def test_a_malformed_vendor_block_is_named_by_its_rule(
    block: VendorBlock, rule: str, detail: str
) -> None:
    assert rule_of([text("a"), StreamEvent(vendor_block=block), END]) == (1, rule, detail)


def test_vendor_block_data_at_the_limit_passes_and_one_byte_more_is_rejected() -> None:
    at_limit = b"{" + b" " * (MAX_DATA_BYTES - 2) + b"}"
    folded = accumulate([vendor("compaction", at_limit), END])
    block = folded.message.content[0].vendor_block
    assert block is not None and len(block.data) == MAX_DATA_BYTES
    over = b"{" + b" " * (MAX_DATA_BYTES - 1) + b"}"
    assert rule_of([vendor("compaction", over)]) == (
        0,
        "stream.vendor_block.data_too_large",
        f"vendor_block.data: data is {MAX_DATA_BYTES + 1} bytes, above the limit of "
        f"{MAX_DATA_BYTES}",
    )


def test_vendor_block_after_usage_is_content_after_usage() -> None:
    events = [StreamEvent(usage=Usage(input_tokens=1)), vendor("compaction", b"{}")]
    index, rule, _ = rule_of(events)
    assert (index, rule) == (1, "stream.order.content_after_usage")


# -- vendor data on text -----------------------------------------------------------------------


def test_text_vendor_data_lands_on_the_block_the_delta_belongs_to() -> None:
    folded = accumulate(
        [
            StreamEvent(thinking_delta=ThinkingDelta(text="t")),
            text("Hello", sig(b"CiQB-sig-one")),
            text(" world"),
            END,
        ]
    )
    _, second = folded.message.content
    assert texts([second]) == [("Hello world", [(GEMINI_PART_THOUGHT_SIGNATURE, b"CiQB-sig-one")])]


def test_an_empty_text_part_carrying_only_a_signature_survives_as_its_own_block() -> None:
    folded = accumulate(
        [
            text("The answer is 4."),
            text("", sig(b"Ci8B-final"), new_block=True),
            END,
        ]
    )
    assert texts(folded.message.content) == [
        ("The answer is 4.", []),
        ("", [(GEMINI_PART_THOUGHT_SIGNATURE, b"Ci8B-final")]),
    ]


def test_an_empty_delta_without_new_block_attaches_its_data_to_the_open_block() -> None:
    citations = VendorData(location=ANTHROPIC_TEXT_CITATIONS, value=b'[{"type":"x"}]')
    folded = accumulate([text("cited text"), text("", citations), END])
    assert texts(folded.message.content) == [
        ("cited text", [(ANTHROPIC_TEXT_CITATIONS, b'[{"type":"x"}]')])
    ]


def test_new_block_keeps_separate_vendor_text_blocks_separate() -> None:
    one = VendorData(location=ANTHROPIC_TEXT_CITATIONS, value=b"[1]")
    two = VendorData(location=ANTHROPIC_TEXT_CITATIONS, value=b"[2]")
    folded = accumulate(
        [
            text("Plain. "),
            text("First claim.", new_block=True),
            text("", one),
            text("Second claim.", two, new_block=True),
            text(" Tail."),
            END,
        ]
    )
    assert texts(folded.message.content) == [
        ("Plain. ", []),
        ("First claim.", [(ANTHROPIC_TEXT_CITATIONS, b"[1]")]),
        ("Second claim. Tail.", [(ANTHROPIC_TEXT_CITATIONS, b"[2]")]),
    ]


def test_new_block_on_the_first_delta_opens_one_block() -> None:
    folded = accumulate([text("only", new_block=True), END])
    assert texts(folded.message.content) == [("only", [])]


def test_an_empty_delta_without_vendor_data_is_still_rejected() -> None:
    assert rule_of([text("a"), text("", new_block=True)]) == (
        1,
        "stream.text_delta.empty",
        "text fragment is empty",
    )


def test_a_location_repeated_within_one_text_block_is_rejected() -> None:
    events = [text("a", sig(b"s1")), text("b"), text("", sig(b"s2"))]
    assert rule_of(events) == (
        2,
        "stream.text_delta.vendor_data.location_duplicate",
        "text_delta: vendor_data[0]: location 'gemini.part.thought_signature' appears twice "
        "on one text block",
    )


def test_a_tool_call_delta_does_not_close_the_text_block_for_the_vendor_data_rules() -> None:
    # A tool call's delta or done between two text deltas leaves the text block open (the
    # accumulator joins the text), so a repeated location is still on one block.
    events = [
        StreamEvent(tool_call_start=ToolCallStart(id="t1", name="f")),
        text("a", sig(b"s1")),
        StreamEvent(tool_call_delta=ToolCallDelta(id="t1", arguments_fragment="{}")),
        StreamEvent(tool_call_done=ToolCallDone(id="t1")),
        text("b", sig(b"s2")),
    ]
    index, rule, _ = rule_of(events)
    assert (index, rule) == (4, "stream.text_delta.vendor_data.location_duplicate")


@pytest.mark.parametrize(
    "closing",
    [
        StreamEvent(thinking_delta=ThinkingDelta(text="t")),
        StreamEvent(tool_call_start=ToolCallStart(id="t9", name="f")),
        vendor("compaction", b"{}"),
    ],
)
def test_the_same_location_on_the_next_text_block_is_accepted(closing: StreamEvent) -> None:
    events = [text("a", sig(b"s1")), closing, text("b", sig(b"s2"))]
    checker = StreamOrderChecker()
    for event in events:
        checker.check(event)
    assert checker.index == 3


def test_the_same_location_after_new_block_is_accepted_and_lands_on_the_new_block() -> None:
    folded = accumulate([text("a", sig(b"s1")), text("b", sig(b"s2"), new_block=True), END])
    assert texts(folded.message.content) == [
        ("a", [(GEMINI_PART_THOUGHT_SIGNATURE, b"s1")]),
        ("b", [(GEMINI_PART_THOUGHT_SIGNATURE, b"s2")]),
    ]


def test_at_most_eight_entries_per_text_block_over_all_its_deltas() -> None:
    entries = [VendorData(location=f"x.loc_{i}", value=b"v") for i in range(MAX_ENTRIES + 1)]
    first = [text("a", *entries[:5])]
    ok = accumulate([*first, text("", *entries[5:MAX_ENTRIES]), END])
    assert len(texts(ok.message.content)[0][1]) == MAX_ENTRIES
    assert rule_of([*first, text("", *entries[5:])]) == (
        1,
        "stream.text_delta.vendor_data.too_many",
        "text_delta: vendor_data[3]: 9 vendor data entries on one text block, above the limit of 8",
    )


@pytest.mark.parametrize(
    ("entry", "rule"),
    [
        (VendorData(location="", value=b"v"), "location_empty"),
        (VendorData(location="Gemini.Part", value=b"v"), "location_invalid"),
        (VendorData(location="gemini.part.thought_signature", value=b""), "value_empty"),
    ],
)
def test_each_vendor_data_rule_applies_to_text_deltas(entry: VendorData, rule: str) -> None:
    index, found, _ = rule_of([text("a", entry)])
    assert (index, found) == (0, f"stream.text_delta.vendor_data.{rule}")


def test_text_vendor_data_value_is_copied_verbatim_not_shared() -> None:
    value = bytearray(b"\x00\xffsig")
    delta = TextDelta(text="a", vendor_data=[VendorData(location="gemini.x", value=bytes(value))])
    folded = accumulate([StreamEvent(text_delta=delta), END])
    block = folded.message.content[0].text
    assert block is not None
    assert block.vendor_data[0].value == b"\x00\xffsig"
    assert block.vendor_data[0] is not delta.vendor_data[0]
