"""Random and mutated bytes into every message decoder.

Every message of ``common.v1``, ``content.v1`` and ``model.v1`` (and the Struct/Value
well-known types) goes through the server's strict decode path,
:func:`protocol_py.server.decode_request` (upb's parser, the wire-type check, then
betterproto2's): the answer is the decoded message or ``GRPCError(INVALID_ARGUMENT)``, never
another exception, and INVALID_ARGUMENT exactly when upb refuses the bytes or a known field
has the wrong wire type (betterproto2 never refuses what upb accepts). Inputs: random bytes
and mutations (flipped, inserted, deleted, truncated, duplicated bytes) of valid encodings.
Bounded with ``max_examples`` so CI stays fast; the number of inputs tried is printed (run
with ``-s``)."""

from __future__ import annotations

import importlib
from typing import Any

import betterproto2
import pytest
from google.protobuf import message_factory  # type: ignore[import-untyped]
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from hypothesis import given
from hypothesis import strategies as st

from protocol_py.codec.structs import from_struct, to_struct
from protocol_py.server import build_descriptor_pool, decode_request
from protocol_py.server.grpc_layer.limits import wrong_wire_type
from protocol_py_gen.content.v1 import ContentBlock, ToolResultBlock, ToolUseBlock
from protocol_py_gen.google.protobuf import Struct, Value
from protocol_py_gen.model.v1 import (
    ConfigureRequest,
    CountTokensRequest,
    RenderRequest,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
)

from .conftest import fuzz_examples, fuzz_settings, mutated, request, user

EXAMPLES_PER_MESSAGE = fuzz_examples(50)
"""Hypothesis examples per message type (58 types; default 50,
``PROTOCOL_PY_FUZZ_EXAMPLES`` overrides it)."""


POOL = build_descriptor_pool(None)
FILES = {
    "common/v1/types.proto": "protocol_py_gen.common.v1",
    "content/v1/types.proto": "protocol_py_gen.content.v1",
    "model/v1/types.proto": "protocol_py_gen.model.v1",
    "model/v1/service.proto": "protocol_py_gen.model.v1",
    "google/protobuf/struct.proto": "protocol_py_gen.google.protobuf",
}


def message_types() -> list[tuple[type[betterproto2.Message], Any]]:
    """(betterproto2 class, upb class) for every top-level message of the protocol's files."""
    found = []
    for file_name, module_name in FILES.items():
        module = importlib.import_module(module_name)
        for name, descriptor in POOL.FindFileByName(file_name).message_types_by_name.items():
            found.append((getattr(module, name), message_factory.GetMessageClass(descriptor)))
    return found


TYPES = message_types()
SEEDS: list[bytes] = [
    bytes(request("Hello there")),
    bytes(ConfigureRequest(config=to_struct({"max_tokens": 10, "base_url": "https://x.y"}))),
    bytes(CountTokensRequest(model_id="reference-small", messages=[user("hi")])),
    bytes(RenderRequest(payload_type="reference.echo", payload=b"abc")),
    bytes(StreamEvent(text_delta=TextDelta(text="hé"))),
    bytes(StreamEvent(tool_call_delta=ToolCallDelta(id="c1", arguments_fragment='{"a":'))),
    bytes(StreamEvent(usage=Usage(input_tokens=3, output_tokens=2))),
    bytes(
        ContentBlock(
            tool_result=ToolResultBlock(
                tool_use_id="t", content=[ContentBlock(tool_use=ToolUseBlock(id="t", name="n"))]
            )
        )
    ),
]
TRIED: dict[str, int] = {}


INPUTS = st.one_of(st.binary(max_size=200), mutated(SEEDS))


@pytest.mark.parametrize(("kind", "strict"), TYPES, ids=[t[0].__name__ for t in TYPES])
def test_strict_decode_answers_a_message_or_invalid_argument(kind: Any, strict: Any) -> None:
    @fuzz_settings(EXAMPLES_PER_MESSAGE)
    @given(INPUTS)
    def check(data: bytes) -> None:
        TRIED[kind.__name__] = TRIED.get(kind.__name__, 0) + 1
        try:
            well_formed = wrong_wire_type(strict.FromString(data)) is None
        except DecodeError:
            well_formed = False
        try:
            message = decode_request(data, kind, strict)
        except GRPCError as exc:
            assert exc.status == Status.INVALID_ARGUMENT
            assert (exc.message or "").startswith(f"malformed request: {kind.__name__} ")
            assert not well_formed, f"well-formed input refused: {data!r}"
            return
        assert well_formed
        assert isinstance(message, kind)
        bytes(message)  # what decoded re-encodes

    check()


def test_inputs_tried_are_reported() -> None:
    total = sum(TRIED.values())
    print(f"decoder fuzzing: {total} inputs over {len(TRIED)} message types")
    assert len(TRIED) == len(TYPES) or not TRIED  # run alone, the counts are empty


def test_struct_entry_without_value_decodes_to_null_and_re_encodes() -> None:
    kind, strict = next(t for t in TYPES if t[0].__name__ == "Struct")
    message = decode_request(b"\x0a\x03\x0a\x01a", kind, strict)
    assert message == Struct(fields={"a": Value()})
    assert from_struct(message) == {"a": None}
    assert bytes(message) == b"\x0a\x05\x0a\x01a\x12\x00"
