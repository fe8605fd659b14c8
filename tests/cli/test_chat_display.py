"""What ``chat`` prints of a stream's events (tool calls on their own line, never after an
empty one) and what ``chat --help`` says ``--tools`` accepts (both shapes ``load_tools``
reads)."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

from protocol_py.cli import build_parser
from protocol_py.cli.chat import load_tools, show_event
from protocol_py_gen.model.v1 import (
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallDone,
    ToolCallStart,
)

CALL = [
    StreamEvent(tool_call_start=ToolCallStart(id="c1", name="look")),
    StreamEvent(tool_call_delta=ToolCallDelta(id="c1", arguments_fragment='{"q":1}')),
    StreamEvent(tool_call_done=ToolCallDone(id="c1")),
]


def _shown(events: list[StreamEvent]) -> str:
    out = io.StringIO()
    mode = ""
    for event in events:
        mode = show_event(out, event, mode)
    return out.getvalue()


def test_a_tool_call_opening_the_answer_starts_the_output_without_an_empty_line() -> None:
    assert _shown(CALL) == '[tool call look({"q":1})]'


def test_a_tool_call_after_text_thinking_or_another_call_starts_a_new_line() -> None:
    text = StreamEvent(text_delta=TextDelta(text="Let me look."))
    thinking = StreamEvent(thinking_delta=ThinkingDelta(text="hmm"))
    assert _shown([text, *CALL]) == 'Let me look.\n[tool call look({"q":1})]'
    assert _shown([thinking, *CALL]) == '[thinking] hmm\n[tool call look({"q":1})]'
    assert _shown([*CALL, *CALL]) == '[tool call look({"q":1})]\n[tool call look({"q":1})]'


def test_chat_help_names_both_shapes_of_the_tools_file(tmp_path: Path) -> None:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    text = " ".join(sub.choices["chat"].format_help().split())
    assert 'an array, or an object with the array under "tools"' in text, text
    declaration = {"name": "look", "description": "d", "inputSchema": {"type": "object"}}
    array, wrapped = tmp_path / "array.json", tmp_path / "wrapped.json"
    array.write_text(json.dumps([declaration]))
    wrapped.write_text(json.dumps({"tools": [declaration]}))
    assert load_tools(str(array)) == load_tools(str(wrapped)) != []
