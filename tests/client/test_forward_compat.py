"""A kernel of this version reading a plugin of a newer minor (docs/forward-compatibility.md).

The "newer minor" is this package's own buf image with one extra value added to every enum and
one extra member added to every oneof (``*_FUTURE`` / ``future_member``), compiled at run time
into google.protobuf classes. Every such value reachable from what a kernel receives
(StreamEvent, GetCapabilities, CountTokens, Render, Describe answers) is built, encoded, decoded
with this package's classes and read by the kernel side: never an exception, the raw value
kept, and the value read as the rule says.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpclib.server
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from protocol_py.client.client import ModelClient
from protocol_py.errors import StreamOrderError, errors_only
from protocol_py.providers import catalog
from protocol_py.rules.accumulate import accumulate
from protocol_py.rules.capabilities import validate_capabilities
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model import v1 as model
from protocol_py_gen.model.v1 import (
    Capabilities,
    ErrorKind,
    GetCapabilitiesRequest,
    GetCapabilitiesResponse,
    ModelServiceBase,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
)
from tests.support.adapters import load_case

IMAGE = Path(__file__).resolve().parents[2] / "gen" / "descriptor" / "protocol.binpb"
NEWER = "1.3"
"""The newer minor's version (this package speaks 1.2)."""

ROOTS = (
    "model.v1.StreamEvent",
    "model.v1.GetCapabilitiesResponse",
    "model.v1.CountTokensResponse",
    "model.v1.RenderResponse",
    "model.v1.DescribeResponse",
)
"""What a kernel receives from a plugin."""


def newer_image() -> descriptor_pool.DescriptorPool:
    """This package's image plus one value per enum and one member per (real) oneof."""
    files = descriptor_pb2.FileDescriptorSet.FromString(IMAGE.read_bytes())
    for file in files.file:
        if not file.package.endswith(".v1") or file.package.startswith("google"):
            continue
        for enum in file.enum_type:
            _add_value(enum)
        for message in file.message_type:
            _extend(message)
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return pool


def _add_value(enum: descriptor_pb2.EnumDescriptorProto) -> None:
    prefix = enum.value[0].name.removesuffix("UNSPECIFIED")
    enum.value.add(name=f"{prefix}FUTURE", number=max(v.number for v in enum.value) + 1)


def _extend(message: descriptor_pb2.DescriptorProto) -> None:
    for enum in message.enum_type:
        _add_value(enum)
    for nested in message.nested_type:
        _extend(nested)
    synthetic = {f.oneof_index for f in message.field if f.proto3_optional}
    for index, _ in enumerate(message.oneof_decl):
        if index in synthetic:
            continue
        message.field.add(
            name="future_member",
            number=max(f.number for f in message.field) + 1,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
            type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
            oneof_index=index,
            json_name="futureMember",
        )


POOL = newer_image()


def newer(name: str) -> Any:
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(name))


@dataclass(frozen=True)
class Future:
    """One newer-minor value: where (field path from a root) and what (an enum or a oneof)."""

    root: str
    path: tuple[str, ...]  # field names from the root; the last is the enum or future member
    what: str  # "model.v1.StopReason" or "oneof model.v1.StreamEvent.event"

    @property
    def id(self) -> str:
        return f"{self.root.split('.')[-1]}.{'.'.join(self.path)}"


def _futures(root: str) -> Iterator[Future]:
    seen: set[str] = set()

    def walk(desc: Descriptor, path: tuple[str, ...]) -> Iterator[Future]:
        for f in desc.fields:
            if f.name == "future_member":
                assert f.containing_oneof is not None
                yield Future(
                    root, (*path, f.name), f"oneof {desc.full_name}.{f.containing_oneof.name}"
                )
            elif f.type == FieldDescriptor.TYPE_ENUM:
                yield Future(root, (*path, f.name), f.enum_type.full_name)
            elif f.type == FieldDescriptor.TYPE_MESSAGE:
                name = f.message_type.full_name
                if name.startswith("google.") or name in seen:
                    continue
                seen.add(name)
                yield from walk(f.message_type, (*path, f.name))
                seen.discard(name)

    yield from walk(POOL.FindMessageTypeByName(root), ())


FUTURES = [f for root in ROOTS for f in _futures(root)]


def test_every_enum_and_oneof_a_kernel_reads_has_a_future_value() -> None:
    """The set of enums and oneofs reachable from the kernel's inputs: each is tested below;
    those only a kernel sends (a plugin reads them) are governed by docs/decisions.md#d18."""
    reached = {f.what for f in FUTURES}
    every: set[str] = set()
    for file_name in ("common/v1/types.proto", "content/v1/types.proto", "model/v1/types.proto"):
        file = POOL.FindFileByName(file_name)
        every.update(e.full_name for e in file.enum_types_by_name.values())
        for message in file.message_types_by_name.values():
            every.update(e.full_name for e in message.enum_types)
            every.update(
                f"oneof {message.full_name}.{o.name}"
                for o in message.oneofs
                if not o.name.startswith("_")  # not a proto3 optional's synthetic oneof
            )
    assert sorted(every - reached) == [
        "content.v1.Role",
        "content.v1.Stability",
        "oneof content.v1.ContentBlock.block",
        "oneof model.v1.CacheBreakpoint.position",
    ]
    assert "model.v1.StopReason" in reached and "oneof model.v1.StreamEvent.event" in reached


def build(future: Future) -> Any:
    """The root message in the newer schema with the future value at ``future.path``."""
    cls = newer(future.root)
    if future.root == "model.v1.GetCapabilitiesResponse":
        base = GetCapabilitiesResponse(capabilities=capabilities())
        message = cls.FromString(bytes(base))
    else:
        message = cls()
    node = message
    for name in future.path[:-1]:
        field = node.DESCRIPTOR.fields_by_name[name]
        if field.is_repeated:
            container = getattr(node, name)
            node = container[0] if len(container) else container.add()
        else:
            node = getattr(node, name)
            node.SetInParent()
    last = node.DESCRIPTOR.fields_by_name[future.path[-1]]
    if last.name == "future_member":
        node.future_member = "from a newer minor"
    else:
        value = max(v.number for v in last.enum_type.values)
        if last.is_repeated:
            getattr(node, last.name).append(value)
        else:
            setattr(node, last.name, value)
    return message


def capabilities(version: str = NEWER) -> Capabilities:
    models = [*catalog.deepseek_models(), *catalog.anthropic_models()]  # windows, tiers, ...
    caps = Capabilities(models=models, protocol_version=version)
    return Capabilities.parse(bytes(caps))


def ours(root: str) -> type[Any]:
    return getattr(model, root.rsplit(".", maxsplit=1)[-1])


@pytest.mark.parametrize("future", FUTURES, ids=[f.id for f in FUTURES])
def test_a_newer_value_decodes_and_is_kept(future: Future) -> None:
    wire = build(future).SerializeToString()
    decoded = ours(future.root).parse(wire)  # never raises
    again = newer(future.root).FromString(bytes(decoded))
    assert again == newer(future.root).FromString(wire)  # the raw value survives re-encoding


STREAM = [f for f in FUTURES if f.root == "model.v1.StreamEvent"]


@pytest.mark.parametrize("future", STREAM, ids=[f.id for f in STREAM])
def test_a_stream_of_a_newer_minor_is_read_not_rejected(future: Future) -> None:
    event = StreamEvent.parse(build(future).SerializeToString())
    events = [StreamEvent.parse(bytes.fromhex("0a040a026869")), event]  # text "hi" first
    if event.stop is None and event.error is None:
        events.append(StreamEvent(stop=model.Stop(reason=StopReason.END_TURN)))
    result = accumulate(events, forward_compatible=True)
    assert result.complete
    assert result.message.content[0].text is not None
    assert result.message.content[0].text.text == "hi"
    if future.path == ("stop", "reason"):
        assert result.stop is not None
        assert (result.stop.reason, result.stop.model_affirmed) == (StopReason.END_TURN, False)
        assert result.future_values == [f"stop.reason={len(StopReason)}"]
    elif future.path == ("error", "kind"):
        assert result.error is not None and result.error.kind == ErrorKind.PERMANENT
        assert result.future_values == [f"error.kind={len(ErrorKind)}"]
    elif future.path == ("future_member",):
        assert result.future_values == ["events[1]: an event kind"]
        assert len(result.message.content) == 1


def test_a_retryable_error_of_an_unknown_kind_reads_as_transient() -> None:
    error = model.ModelError(kind=len(ErrorKind), retryable=True, message="m")  # type: ignore[arg-type]
    event = StreamEvent.parse(bytes(StreamEvent(error=error)))
    result = accumulate([event], forward_compatible=True)
    assert result.error is not None
    assert (result.error.kind, result.error.message) == (ErrorKind.TRANSIENT, "m")


@pytest.mark.parametrize(
    "future",
    [f for f in STREAM if f.path in (("stop", "reason"), ("error", "kind"), ("future_member",))],
    ids=lambda f: f.id,
)
def test_the_same_values_from_a_peer_of_this_version_are_violations(future: Future) -> None:
    event = StreamEvent.parse(build(future).SerializeToString())
    with pytest.raises(StreamOrderError) as info:
        accumulate([event])
    assert info.value.rule in (
        "stream.stop.reason_unknown",
        "stream.error.kind_unknown",
        "stream.event.empty",
    )


CAPS = [f for f in FUTURES if f.root == "model.v1.GetCapabilitiesResponse"]


@pytest.mark.parametrize("future", CAPS, ids=[f.id for f in CAPS])
def test_capabilities_of_a_newer_minor_are_accepted_with_warnings(future: Future) -> None:
    response = GetCapabilitiesResponse.parse(build(future).SerializeToString())
    assert response.capabilities is not None
    violations = validate_capabilities(response.capabilities)
    assert errors_only(violations) == []
    rules = {v.rule for v in violations}
    assert "capabilities.protocol_version.newer_minor" in rules
    if future.what.startswith("oneof"):
        return
    assert "enum.unknown_value" in rules
    same = copy.deepcopy(response.capabilities)
    same.protocol_version = "1.2"  # a peer of this version sending it: an error
    assert "enum.unknown_value" in {v.rule for v in errors_only(validate_capabilities(same))}


# -- D15 end to end: a plugin of a newer minor over gRPC ---------------------------------------

D15 = load_case("D15")


class NewerPlugin(ModelServiceBase):
    """A plugin of protocol 1.3 that streams the D15 events byte for byte."""

    async def get_capabilities(self, message: GetCapabilitiesRequest) -> GetCapabilitiesResponse:
        spec = model.ModelSpec.from_dict(
            {k: v for k, v in D15["input"]["model_spec"].items() if k != "pricing"}
        )
        spec.pricing = model.Pricing(currency="USD", free=True)
        return GetCapabilitiesResponse(
            capabilities=Capabilities(models=[spec], protocol_version=NEWER)
        )

    async def stream_completion(
        self, message: StreamCompletionRequest
    ) -> AsyncIterator[StreamEvent]:
        for wire in D15["input"]["events_hex"].values():
            yield StreamEvent.parse(bytes.fromhex(wire))


async def test_a_newer_stop_reason_reads_as_end_turn_not_affirmed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = grpclib.server.Server([NewerPlugin()])
    await server.start("127.0.0.1", 0)
    port = server._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = ModelClient.connect(f"127.0.0.1:{port}")
    try:
        caps = await client.get_capabilities(timeout=10)
        assert caps.protocol_version == NEWER
        request = StreamCompletionRequest(
            model_id="m-next",
            messages=[
                Message(role=Role.USER, id="m1", content=[ContentBlock(text=TextBlock(text="?"))])
            ],
        )
        with caplog.at_level(logging.WARNING, logger="protocol_py.rules"):
            completion = await client.complete(request, timeout=10)
    finally:
        client.close()
        server.close()
        await server.wait_closed()
    assert [b.text.text for b in completion.message.content if b.text] == ["hi"]
    assert completion.usage is not None
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (2, 1)
    assert completion.stop is not None
    assert (completion.stop.reason, completion.stop.model_affirmed) == (StopReason.END_TURN, False)
    assert completion.response.future_values == ["stop.reason=9"]
    assert "stop reason 9" in caplog.text
