"""protocol_py.codec.metadata, the one reader of betterproto2's class metadata, checked from
outside betterproto2.

Field names, order, numbers, types, presence, oneof groups, map entries and field classes are
compared with google's descriptors of the same ``proto/`` files (the upb classes of the ``upb``
fixture); defaults with what an unset field of a fresh instance reads; :data:`UNKNOWN_FIELDS`
with what betterproto2's own parser keeps and writes back. A betterproto2 release that lays out
its metadata differently fails here before anything that depends on it.
"""

from __future__ import annotations

from typing import Any

import betterproto2
import pytest

import protocol_py_gen.common.v1 as common_v1
import protocol_py_gen.content.v1 as content_v1
import protocol_py_gen.model.v1 as model_v1
from protocol_py.codec import metadata, wire
from protocol_py_gen.google.protobuf import Duration, Struct, Timestamp, Value
from protocol_py_gen.message_pool import default_message_pool
from protocol_py_gen.model.v1 import ModelSpec, StreamCompletionRequest, StreamEvent, TextDelta

# google.protobuf.FieldDescriptor.TYPE_* -> betterproto2's type names
UPB_TYPES = {
    1: "double",
    2: "float",
    3: "int64",
    4: "uint64",
    5: "int32",
    6: "fixed64",
    7: "fixed32",
    8: "bool",
    9: "string",
    11: "message",
    12: "bytes",
    13: "uint32",
    14: "enum",
    15: "sfixed32",
    16: "sfixed64",
    17: "sint32",
    18: "sint64",
}


def full_name(cls: type) -> str:
    """The proto full name (``model.v1.StreamEvent``) of a generated message class."""
    return default_message_pool.type_to_url[cls].rsplit("/", 1)[1]


def message_classes() -> list[type[betterproto2.Message]]:
    found = [
        obj
        for module in (common_v1, content_v1, model_v1)
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, betterproto2.Message)
        and obj.__module__ == module.__name__
    ]
    return sorted(found, key=full_name)


CLASSES = [pytest.param(cls, id=full_name(cls)) for cls in message_classes()]


def real_oneofs(descriptor: Any) -> list[Any]:
    """The descriptor's oneofs, without the synthetic one of each proto3 ``optional`` field."""
    return [
        oneof
        for oneof in descriptor.oneofs
        if not (len(oneof.fields) == 1 and oneof.name == "_" + oneof.fields[0].name)
    ]


def is_map(field: Any) -> bool:
    return bool(field.message_type is not None and field.message_type.GetOptions().map_entry)


def check_value_class(cls: Any, descriptor: Any) -> None:
    """``cls`` is the betterproto2 class of a message- or enum-typed field ``descriptor``."""
    if descriptor.message_type is not None:
        assert full_name(cls) == descriptor.message_type.full_name
    elif descriptor.enum_type is not None:
        assert issubclass(cls, betterproto2.Enum)
        assert {int(m) for m in cls} == {v.number for v in descriptor.enum_type.values}


def test_every_message_of_the_protos_is_checked(upb: Any) -> None:
    def names(descriptor: Any) -> list[str]:
        if descriptor.GetOptions().map_entry:
            return []
        nested = [n for sub in descriptor.nested_types for n in names(sub)]
        return [descriptor.full_name, *nested]

    declared = {
        name
        for module in upb.modules.values()
        if module.DESCRIPTOR.package in ("common.v1", "content.v1", "model.v1")
        for message in module.DESCRIPTOR.message_types_by_name.values()
        for name in names(message)
    }
    assert {full_name(cls) for cls in message_classes()} == declared
    assert "model.v1.ModelSpec" in declared


@pytest.mark.parametrize("cls", CLASSES)
def test_fields_are_those_of_the_proto(upb: Any, cls: type[betterproto2.Message]) -> None:
    descriptor = upb.message(full_name(cls)).DESCRIPTOR
    fields = metadata.fields(cls)
    # declaration order, proto names (betterproto2 appends "_" to a Python keyword)
    assert [name.rstrip("_") for name in fields] == [f.name for f in descriptor.fields]
    groups = {f.name: oneof.name for oneof in real_oneofs(descriptor) for f in oneof.fields}
    for field, proto in zip(fields.values(), descriptor.fields, strict=True):
        assert field.number == proto.number, field.name
        assert field.group == groups.get(proto.name), field.name
        assert field.presence is proto.has_presence, field.name
        assert field.optional is proto.has_presence, field.name
        if is_map(proto):
            key, value = (
                proto.message_type.fields_by_name["key"],
                proto.message_type.fields_by_name["value"],
            )
            assert field.proto_type == "map"
            assert not field.repeated
            assert field.map_key is not None and field.map_value is not None
            assert (field.map_key.number, field.map_value.number) == (1, 2)
            assert field.map_key.proto_type == UPB_TYPES[key.type]
            assert field.map_value.proto_type == UPB_TYPES[value.type]
            check_value_class(field.map_value.cls, value)
            continue
        assert field.map_key is None and field.map_value is None
        assert field.repeated is proto.is_repeated, field.name
        assert field.proto_type == UPB_TYPES[proto.type], field.name
        if field.unwrap is not None:  # a wrapped well-known type, held as a Python value
            assert full_name(field.unwrap()) == proto.message_type.full_name
        elif proto.message_type is not None or proto.enum_type is not None:
            check_value_class(field.cls, proto)


@pytest.mark.parametrize("cls", CLASSES)
def test_defaults_are_what_an_unset_field_reads(cls: type[betterproto2.Message]) -> None:
    fresh = cls()
    for field in metadata.fields(cls).values():
        default = field.default()
        assert getattr(fresh, field.name) == default, field.name
        assert (default is None) is field.presence, field.name
        if field.map_value is not None:
            assert default == {}
        elif field.repeated:
            assert default == []


def test_map_entries_of_a_struct() -> None:
    entries = metadata.fields(Struct)["fields"]
    assert entries.proto_type == "map"
    assert entries.map_key is not None and entries.map_value is not None
    assert entries.map_key.proto_type == "string"
    assert entries.map_key.default() == ""
    assert entries.map_value.proto_type == "message"
    assert entries.map_value.cls is Value
    assert entries.map_value.default() is None  # an entry decoded without its value


@pytest.mark.parametrize("cls", CLASSES)
def test_oneof_members_in_declaration_order(upb: Any, cls: type[betterproto2.Message]) -> None:
    descriptor = upb.message(full_name(cls)).DESCRIPTOR
    for oneof in real_oneofs(descriptor):
        members = metadata.oneof_members(cls, oneof.name)
        assert [name.rstrip("_") for name in members] == [f.name for f in oneof.fields]


def test_oneof_members_of_a_stream_event_and_an_unknown_group() -> None:
    members = metadata.oneof_members(StreamEvent, "event")
    assert members[:3] == ("text_delta", "thinking_delta", "thinking_signature")
    assert members[-3:] == ("stop", "error", "vendor_block")  # vendor_block: protocol 1.2
    assert metadata.oneof_members(StreamEvent, "no_such_group") == ()
    assert metadata.oneof_members(ModelSpec, "event") == ()


def test_field_number(upb: Any) -> None:
    descriptor = upb.message("model.v1.StreamCompletionRequest").DESCRIPTOR
    number = metadata.field_number(StreamCompletionRequest, "messages")
    assert number == descriptor.fields_by_name["messages"].number
    with pytest.raises(KeyError):
        metadata.field_number(StreamCompletionRequest, "no_such_field")


def test_unknown_fields_attribute_keeps_the_raw_bytes() -> None:
    unknown = bytes([0xB8, 0x3E, 0x07])  # field 999, varint 7: no class declares it
    data = bytes(TextDelta(text="a")) + unknown
    for parsed in (TextDelta().parse(data), wire.decode(TextDelta, data)):
        assert parsed.text == "a"
        assert getattr(parsed, metadata.UNKNOWN_FIELDS) == unknown
        assert bytes(parsed) == data  # written back after the known fields
    assert getattr(TextDelta(text="a"), metadata.UNKNOWN_FIELDS) == b""


def test_is_well_known() -> None:
    for cls in (Struct, Value, Timestamp, Duration):
        assert metadata.is_well_known(cls)
    for cls in (ModelSpec, StreamEvent, TextDelta):
        assert not metadata.is_well_known(cls)


def test_fields_is_built_once_per_class() -> None:
    assert metadata.fields(ModelSpec) is metadata.fields(ModelSpec)
    with pytest.raises(AttributeError):
        metadata.fields(int)  # type: ignore[arg-type]
