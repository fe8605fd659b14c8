"""providers/http/call_ids: kernel tool-call ids unique within the conversation, the vendor's own
id kept for replay only where it is unambiguous."""

from __future__ import annotations

import re

from protocol_py.providers.http.call_ids import (
    OPENAI_TOOL_CALL_ID,
    CallIds,
    history_ids,
    replay_ids,
    vendor_id_entry,
)
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    ToolResultBlock,
    ToolUseBlock,
    VendorData,
)
from protocol_py_gen.model.v1 import StreamCompletionRequest

FRESH = re.compile(r"call_[0-9A-HJKMNP-TV-Z]{26}")


def use(call_id: str, *vendor: VendorData) -> ContentBlock:
    return ContentBlock(tool_use=ToolUseBlock(id=call_id, name="f", vendor_data=list(vendor)))


def result(call_id: str) -> ContentBlock:
    return ContentBlock(tool_result=ToolResultBlock(tool_use_id=call_id))


HISTORY = [
    Message(role=Role.ASSISTANT, id="a1", content=[use("read_file:0"), use("read_file:1")]),
    Message(role=Role.USER, id="u1", content=[result("read_file:0"), result("read_file:1")]),
    Message(role=Role.USER, id="u2", content=[result("orphan_7")]),
]


def test_history_ids_are_every_call_and_every_answered_id() -> None:
    assert history_ids(HISTORY) == {"read_file:0", "read_file:1", "orphan_7"}


def test_a_free_vendor_id_is_the_kernel_id() -> None:
    ids = CallIds(history_ids(HISTORY))
    assert ids.issue("read_file:2") == ("read_file:2", None)


def test_a_vendor_id_taken_by_the_history_gets_a_fresh_id_and_is_kept() -> None:
    ids = CallIds.from_request(StreamCompletionRequest(messages=HISTORY))
    issued = ids.issue("read_file:0")
    assert FRESH.fullmatch(issued.id)
    assert issued.vendor_id == "read_file:0"
    assert ids.issue("orphan_7").vendor_id == "orphan_7"  # an answered id counts as taken


def test_one_vendor_id_for_two_calls_of_a_response_keeps_the_first_only() -> None:
    ids = CallIds()
    first, second = ids.issue("call_f0de"), ids.issue("call_f0de")
    assert first == ("call_f0de", None)
    assert FRESH.fullmatch(second.id) and second.vendor_id is None  # ambiguous: not kept
    third = CallIds(["h"])
    assert third.issue("h").vendor_id == "h"
    assert third.issue("h").vendor_id is None  # the second "h" of the same response


def test_no_vendor_id_gets_a_fresh_one_never_a_counter() -> None:
    ids = CallIds(prefix="toolu_")
    a, b = ids.issue(None), ids.issue("")
    assert a.id != b.id and all(re.fullmatch(r"toolu_[0-9A-Z]{26}", x.id) for x in (a, b))
    assert (a.vendor_id, b.vendor_id) == (None, None)
    # a second response (a new issuer) never repeats them: no per-stream counter
    assert CallIds().issue(None).id not in (a.id, b.id)


def test_a_vendor_id_equal_to_an_issued_fresh_id_is_replaced_too() -> None:
    ids = CallIds()
    fresh = ids.issue(None).id
    again = ids.issue(fresh)
    assert again.id != fresh and again.vendor_id is None


def test_replay_ids_map_kernel_ids_to_the_kept_vendor_ids() -> None:
    messages = [
        Message(
            role=Role.ASSISTANT,
            id="a",
            content=[
                use("call_01", vendor_id_entry(OPENAI_TOOL_CALL_ID, "read_file:0")),
                use("call_02", VendorData(location="anthropic.tool_use.id", value=b"x")),
                use("call_03", VendorData(location=OPENAI_TOOL_CALL_ID, value=b"\xff")),
            ],
        )
    ]
    assert replay_ids(messages, OPENAI_TOOL_CALL_ID) == {"call_01": "read_file:0"}
