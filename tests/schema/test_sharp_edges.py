"""The toolchain sharp edges (DEVELOPMENT.md), pinned so that an upgrade changing them is noticed.

* a oneof member at its default keeps its case (wire, to_dict, from_dict);
* assigning a second oneof member does not clear the first (build events through constructors);
* raw ``Struct`` numbers: floats after the wire, 2**53+1 rounded, NaN accepted, PYTHON output
  raising; ``protocol_py.codec.structs`` is where these are handled;
* field names that are Python keywords get a trailing underscore; a field named like a message
  method breaks the class (so the protos must never have one).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import keyword
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import betterproto2
import pytest
from grpc_tools import protoc

import protocol_py_gen.common.v1 as common_v1
import protocol_py_gen.content.v1 as content_v1
import protocol_py_gen.model.v1 as model_v1
from protocol_py.codec.structs import from_struct, to_struct
from protocol_py.errors import InvalidValueError
from protocol_py_gen.content.v1 import ContentBlock, TextBlock, ToolUseBlock
from protocol_py_gen.google.protobuf import Struct
from protocol_py_gen.model.v1 import (
    BudgetControl,
    CacheBreakpoint,
    RenderFormat,
    RenderRequest,
    Stop,
    StopReason,
    StreamEvent,
    TextDelta,
    TokenRange,
)

# --- oneof member at its default keeps its case ----------------------------------------------


def test_oneof_member_at_default_keeps_case_on_the_wire() -> None:
    event = StreamEvent(text_delta=TextDelta(text=""))
    assert bytes(event).hex() == "0a00"
    parsed = StreamEvent.parse(bytes(event))
    assert betterproto2.which_one_of(parsed, "event") == ("text_delta", TextDelta(text=""))


def test_oneof_member_at_default_keeps_case_in_json() -> None:
    event = StreamEvent(text_delta=TextDelta(text=""))
    assert event.to_dict() == {"textDelta": {}}
    assert event.to_json() == '{"textDelta": {}}'
    back = StreamEvent.from_dict(event.to_dict())
    assert betterproto2.which_one_of(back, "event") == ("text_delta", TextDelta(text=""))
    back = StreamEvent.from_json(event.to_json())
    assert betterproto2.which_one_of(back, "event") == ("text_delta", TextDelta(text=""))


def test_scalar_oneof_member_at_zero_keeps_case() -> None:
    marker = CacheBreakpoint(after_message_index=0)
    assert bytes(marker).hex() == "1800"
    assert betterproto2.which_one_of(CacheBreakpoint.parse(b"\x18\x00"), "position") == (
        "after_message_index",
        0,
    )
    assert marker.to_dict() == {"afterMessageIndex": "0"}
    assert betterproto2.which_one_of(CacheBreakpoint.from_dict(marker.to_dict()), "position") == (
        "after_message_index",
        0,
    )


def test_unset_oneof_has_no_case() -> None:
    assert bytes(StreamEvent()) == b""
    assert betterproto2.which_one_of(StreamEvent(), "event") == ("", None)
    assert betterproto2.which_one_of(StreamEvent.parse(b""), "event") == ("", None)


# --- second oneof member ---------------------------------------------------------------------


def test_constructor_with_one_member_yields_exactly_that_member() -> None:
    event = StreamEvent(stop=Stop(reason=StopReason.END_TURN))
    assert betterproto2.which_one_of(event, "event") == ("stop", Stop(reason=StopReason.END_TURN))
    set_members = [f.name for f in dataclasses.fields(event) if getattr(event, f.name) is not None]
    assert set_members == ["stop"]


def test_assigning_a_second_member_keeps_both_and_writes_both() -> None:
    # Current betterproto2 0.10 behaviour: the first member is not cleared.
    event = StreamEvent(text_delta=TextDelta(text="a"))
    event.stop = Stop()
    assert event.text_delta == TextDelta(text="a")
    assert bytes(event).hex() == "0a030a0161" + "6200"  # both members on the wire
    with pytest.raises(RuntimeError, match="more than one field set in oneof"):
        betterproto2.which_one_of(event, "event")


def test_constructor_does_not_reject_two_members() -> None:
    # Nothing stops a caller from passing two members; only which_one_of notices.
    event = StreamEvent(text_delta=TextDelta(text="a"), stop=Stop())
    with pytest.raises(RuntimeError, match="more than one field set in oneof"):
        betterproto2.which_one_of(event, "event")


def test_two_members_on_the_wire_are_both_kept_by_the_parser() -> None:
    # proto3 says the last member on the wire wins (upb keeps only `stop`); betterproto2 keeps
    # both, so code reading peer input must expect which_one_of to raise RuntimeError.
    parsed = StreamEvent.parse(bytes.fromhex("0a030a01616200"))
    assert parsed.text_delta == TextDelta(text="a")
    assert parsed.stop == Stop()
    with pytest.raises(RuntimeError):
        betterproto2.which_one_of(parsed, "event")


# --- Struct ----------------------------------------------------------------------------------


def test_raw_struct_numbers_come_back_as_floats_after_the_wire() -> None:
    raw = Struct.from_dict({"n": 3})
    assert raw.to_dict() == {"n": 3}
    after_wire = Struct.parse(bytes(raw)).to_dict()
    assert after_wire == {"n": 3.0}
    assert type(after_wire["n"]) is float
    # structs.py renders integral numbers back as integers.
    assert from_struct(Struct.parse(bytes(to_struct({"n": 3})))) == {"n": 3}
    assert type(from_struct(Struct.parse(bytes(to_struct({"n": 3}))))["n"]) is int


def test_raw_struct_silently_rounds_beyond_2_53_and_structs_rejects() -> None:
    raw = Struct.from_dict({"id": 2**53 + 1})
    assert Struct.parse(bytes(raw)).to_dict() == {"id": float(2**53)}
    with pytest.raises(InvalidValueError, match="id") as info:
        to_struct({"id": 2**53 + 1})
    assert info.value.path == "id"


def test_raw_struct_accepts_nan_and_emits_invalid_json_and_structs_rejects() -> None:
    raw = Struct.from_dict({"x": float("nan")})
    text = raw.to_json()
    assert text == '{"x": NaN}'

    def strict(constant: str) -> Any:
        raise ValueError(constant)

    with pytest.raises(ValueError, match="NaN"):
        json.loads(text, parse_constant=strict)
    with pytest.raises(InvalidValueError, match="not valid JSON"):
        to_struct({"x": float("nan")})


def test_python_output_format_on_a_message_holding_a_struct_raises() -> None:
    block = ToolUseBlock(id="t", name="n", input=to_struct({"a": 1}))
    with pytest.raises(AssertionError):
        block.to_dict(output_format=betterproto2.OutputFormat.PYTHON)
    # Messages without a Struct are fine in PYTHON output (enums as members, bytes as bytes).
    assert StreamEvent(stop=Stop(reason=StopReason.END_TURN)).to_dict(
        output_format=betterproto2.OutputFormat.PYTHON
    ) == {"stop": {"reason": StopReason.END_TURN}}


# --- field names -----------------------------------------------------------------------------


def message_classes() -> list[type[betterproto2.Message]]:
    return [
        obj
        for module in (common_v1, content_v1, model_v1)
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, betterproto2.Message)
        and obj.__module__ == module.__name__
    ]


def test_no_field_is_named_like_a_message_method() -> None:
    reserved = {name for name in dir(betterproto2.Message) if not name.startswith("__")}
    assert {"parse", "to_dict", "from_dict", "to_json", "is_set", "dump"} <= reserved
    clashes = [
        f"{cls.__name__}.{field.name}"
        for cls in message_classes()
        for field in dataclasses.fields(cls)
        if field.name in reserved
    ]
    assert clashes == []


def test_builtin_like_field_names_are_kept() -> None:
    # default, min, max, range, input, format, id shadow builtins, not keywords: kept as is.
    budget = BudgetControl(range=TokenRange(min=1024, max=32000), default=0)
    assert budget.to_dict() == {"range": {"min": "1024", "max": "32000"}, "default": "0"}
    assert BudgetControl.from_dict(budget.to_dict()) == budget
    request = RenderRequest(payload_type="x", format=RenderFormat.MARKDOWN)
    assert request.to_dict()["format"] == "RENDER_FORMAT_MARKDOWN"
    assert ToolUseBlock(input=to_struct({})).input == Struct()
    assert not any(
        keyword.iskeyword(field.name)
        for cls in message_classes()
        for field in dataclasses.fields(cls)
    )


TINY_PROTO = """\
syntax = "proto3";
package tiny.v1;
message Keywords {
  string from = 1;
  optional int64 class = 2;
  bool global = 3;
}
message Methods {
  string to_dict = 1;
}
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """A throwaway proto compiled with this environment's betterproto2 plugin."""
    root = tmp_path_factory.mktemp("tiny")
    (root / "in/tiny/v1").mkdir(parents=True)
    (root / "in/tiny/v1/tiny.proto").write_text(TINY_PROTO, encoding="utf-8")
    (root / "out/tinygen").mkdir(parents=True)
    (root / "ruff.toml").write_text("line-length = 88\n", encoding="utf-8")
    bin_dir = Path(sys.executable).parent
    plugin = bin_dir / "protoc-gen-python_betterproto2"
    old_path, old_cwd = os.environ.get("PATH", ""), Path.cwd()
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{old_path}"  # the plugin runs ruff
    os.chdir(root)
    try:
        args = [
            "protoc",
            "-Iin",
            f"--plugin=protoc-gen-python_betterproto2={plugin}",
            "--python_betterproto2_out=out/tinygen",
            "tiny/v1/tiny.proto",
        ]
        assert protoc.main(args) == 0
    finally:
        os.environ["PATH"] = old_path
        os.chdir(old_cwd)
    sys.path.insert(0, str(root / "out"))
    try:
        yield importlib.import_module("tinygen.tiny.v1")
    finally:
        sys.path.remove(str(root / "out"))


def test_python_keyword_fields_get_a_trailing_underscore(tiny: ModuleType) -> None:
    names = [field.name for field in dataclasses.fields(tiny.Keywords)]
    assert names == ["from_", "class_", "global_"]
    message = tiny.Keywords(from_="a", class_=0, global_=True)
    assert bytes(message).hex() == "0a0161" + "1000" + "1801"
    # JSON keeps the proto name.
    assert message.to_dict() == {"from": "a", "class": "0", "global": True}
    assert tiny.Keywords.from_dict({"from": "a", "class": "0", "global": True}) == message


def test_a_field_named_like_a_method_breaks_the_class(tiny: ModuleType) -> None:
    message = tiny.Methods(to_dict="x")
    assert bytes(message).hex() == "0a0178"
    with pytest.raises(TypeError, match="not callable"):
        message.to_dict()


def test_content_block_oneof_survives_through_constructor() -> None:
    block = ContentBlock(text=TextBlock(text=""))
    assert bytes(block).hex() == "0a00"
    assert betterproto2.which_one_of(ContentBlock.parse(bytes(block)), "block") == (
        "text",
        TextBlock(text=""),
    )
