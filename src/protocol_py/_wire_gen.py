"""Per-class encode/decode functions for :mod:`protocol_py.wire`, generated at first use.

For each generated betterproto2 class, the field table (betterproto2's own metadata: numbers,
proto types, repeated/optional/oneof, maps, wrapped well-known types) is turned into the source
of two straight-line Python functions, compiled with ``exec`` once per class (as dataclasses
and attrs build their methods): one decodes the class's fields from a buffer slice in place,
one encodes an instance. They mirror betterproto2's own ``load`` and ``__bytes__`` rule by rule
and raise :class:`FallbackError` for anything else, so :mod:`protocol_py.wire` can hand such input
back to betterproto2.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from typing import Any, Final

import betterproto2

MAX_FAST_DEPTH: Final = 64
"""Deepest message nesting, in message levels, decoded by the generated functions; a deeper
message goes to betterproto2 (same result) and is reported as not clean."""

LARGE_STRING: Final = 1 << 20
"""Strings of this many bytes or more (1 MiB) are decoded from a memoryview, without the
intermediate bytes copy."""


class FallbackError(Exception):
    """The generated code does not cover this input: betterproto2 handles the whole message."""


class State:
    """Per-call decoding state: ``clean`` stays True while every enum number is a known member
    and every map entry carries its message value; ``unknown`` turns True at the first field
    number the class does not know (kept in ``_unknown_fields``)."""

    __slots__ = ("clean", "unknown")

    def __init__(self) -> None:
        self.clean = True
        self.unknown = False


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of the varint at ``pos`` (at most 10 bytes, as betterproto2)."""
    result = 0
    shift = 0
    while True:
        if shift >= 70:
            raise FallbackError
        byte = data[pos]  # IndexError past the end: the caller falls back
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


SMALL: Final = [bytes([i]) for i in range(128)]


def varint_bytes(value: int) -> bytes:
    """betterproto2's varint encoding (negative numbers as 10-byte two's complement)."""
    if 0 <= value < 128:
        return SMALL[value]
    if value < 0:
        if value < -(1 << 63):
            raise FallbackError
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)
    return bytes(out)


def skip_unknown(  # noqa: PLR0917  (called from generated code, positionally)
    data: bytes, start: int, pos: int, tag: int, end: int, d: dict[str, Any], st: State
) -> int:
    """Skip the unknown field whose tag ended at ``pos``; its raw bytes go to
    ``_unknown_fields`` as betterproto2 keeps them (``st.unknown`` is set)."""
    st.unknown = True
    wire = tag & 7
    if wire == 0:
        _, pos = varint(data, pos)
    elif wire == 2:
        size, pos = varint(data, pos)
        pos += size
    elif wire == 1:
        pos += 8
    elif wire == 5:
        pos += 4
    else:
        raise FallbackError  # groups
    if pos > end:
        raise FallbackError
    d["_unknown_fields"] += data[start:pos]
    return pos


def decode_str(data: bytes, pos: int, nxt: int) -> str:
    """UTF-8 text of ``data[pos:nxt]``."""
    if nxt - pos < LARGE_STRING:
        return data[pos:nxt].decode("utf-8")
    return str(memoryview(data)[pos:nxt], "utf-8")


_VARINT_DECODE: Final = {
    betterproto2.TYPE_INT32: "v &= 0xFFFFFFFF\n{i}if v >= 0x80000000: v -= 0x100000000",
    betterproto2.TYPE_INT64: "v &= 0xFFFFFFFFFFFFFFFF\n{i}if v >= 0x8000000000000000: "
    "v -= 0x10000000000000000",
    betterproto2.TYPE_UINT32: "v &= 0xFFFFFFFF",
    betterproto2.TYPE_UINT64: "v &= 0xFFFFFFFFFFFFFFFF",
    betterproto2.TYPE_SINT32: "v &= 0xFFFFFFFF\n{i}v = (v >> 1) ^ (-(v & 1))",
    betterproto2.TYPE_SINT64: "v &= 0xFFFFFFFFFFFFFFFF\n{i}v = (v >> 1) ^ (-(v & 1))",
    betterproto2.TYPE_BOOL: "v = v > 0",
    betterproto2.TYPE_ENUM: "v &= 0xFFFFFFFFFFFFFFFF\n{i}if v >= 0x8000000000000000: "
    "v -= 0x10000000000000000\n{i}e = {members}.get(v)\n{i}if e is None:\n{i}    "
    "st.clean = False\n{i}    e = {enum}(v)\n{i}v = e",
}
_FIXED: Final = {
    betterproto2.TYPE_DOUBLE: ("<d", 1, 8),
    betterproto2.TYPE_FLOAT: ("<f", 5, 4),
    betterproto2.TYPE_FIXED32: ("<I", 5, 4),
    betterproto2.TYPE_FIXED64: ("<Q", 1, 8),
    betterproto2.TYPE_SFIXED32: ("<i", 5, 4),
    betterproto2.TYPE_SFIXED64: ("<q", 1, 8),
}
_LEN = (betterproto2.TYPE_STRING, betterproto2.TYPE_BYTES, betterproto2.TYPE_MESSAGE)
_LENGTH: Final = (
    "n = data[pos]",
    "if n < 128:",
    "    pos += 1",
    "else:",
    "    n, pos = varint(data, pos)",
    "nxt = pos + n",
    "if nxt > end:",
    "    raise FallbackError",
)


def _meta(cls: type[Any]) -> Any:
    return getattr(cls, "_betterproto")  # noqa: B009  (a classproperty mypy cannot see)


class _Generator:
    """Builds and caches the functions; one instance per process (:data:`GENERATOR`)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.ns: dict[str, Any] = {
            "FallbackError": FallbackError,
            "varint": varint,
            "varint_bytes": varint_bytes,
            "SMALL": SMALL,
            "skip_unknown": skip_unknown,
            "decode_str": decode_str,
            "unpack_from": struct.unpack_from,
            "new": object.__new__,
            "Message": betterproto2.Message,
            "MAX_DEPTH": MAX_FAST_DEPTH,
        }
        self.decoders: dict[type[Any], Any] = {}
        self.encoders: dict[type[Any], Any] = {}
        self.names: dict[Any, str] = {}

    def const(self, value: Any, hint: str) -> str:
        """A namespace name bound to ``value`` (classes, tables, formats)."""
        key = (hint, id(value))
        name = self.names.get(key)
        if name is None:
            name = f"_{hint}{len(self.names)}"
            self.names[key] = name
            self.ns[name] = value
        return name

    # -- decoding ------------------------------------------------------------------------------

    def decoder(self, cls: type[Any]) -> Any:
        """The generated decoder of ``cls`` (built on first use)."""
        return self._get(cls, self.decoders, self._build_decoder)

    def _get(self, cls: type[Any], table: dict[type[Any], Any], build: Any) -> Any:
        func = table.get(cls)
        if func is None:
            with self.lock:
                func = table.get(cls)
                if func is None:
                    func = build(cls)
        return func

    def _decoder_name(self, cls: type[Any]) -> str:
        name = self.const(cls, "dec_of_")
        return name + "_d"

    def _build_decoder(self, cls: type[Any]) -> Any:
        return self._build(cls, self.decoders, self._decoder_source, self._decoder_name, "decoder")

    def _build(
        self,
        cls: type[Any],
        table: dict[type[Any], Any],
        source_of: Callable[[type[Any]], tuple[str, list[type[Any]]]],
        name_of: Callable[[type[Any]], str],
        what: str,
    ) -> Any:
        """Generate, compile and record the functions of ``cls`` and every class it needs."""
        pending: list[type[Any]] = [cls]
        built: list[tuple[type[Any], str]] = []
        seen: set[type[Any]] = set(table)
        while pending:
            current = pending.pop()
            if current in seen:
                continue
            seen.add(current)
            source, needs = source_of(current)
            built.append((current, source))
            pending.extend(needs)
        for current, source in built:
            exec(compile(source, f"<protocol_py.wire {what} {current.__name__}>", "exec"), self.ns)
        for current, _ in built:
            table[current] = self.ns[name_of(current)]
        return table[cls]

    def _decoder_source(self, cls: type[Any]) -> tuple[str, list[type[Any]]]:
        meta_all = _meta(cls)
        fname = self._decoder_name(cls)
        needs: list[type[Any]] = []
        defaults: dict[str, Any] = {"_unknown_fields": b""}
        fresh: list[str] = []
        branches: list[tuple[int, list[str]]] = []
        numbers = set()
        i3, i4 = " " * 12, " " * 16
        for name, meta in meta_all.meta_by_field_name.items():
            numbers.add(meta.number)
            field_cls = meta_all.cls_by_field.get(name)
            if meta.repeated:
                fresh.append(f"d[{name!r}] = []")
            elif meta.map_meta is not None:
                fresh.append(f"d[{name!r}] = {{}}")
            else:
                default = meta_all.default_gen[name]()
                if isinstance(default, (list, dict)):
                    raise TypeError(f"{cls.__name__}.{name}: mutable default")
                defaults[name] = default
            if meta.map_meta is not None:
                key_meta, value_meta = meta.map_meta
                value_cls = meta_all.cls_by_field[f"{name}.value"]
                entry = self._map_entry(field_cls, key_meta, value_meta, value_cls, needs)
                body = [
                    *_LENGTH,
                    f"k, v = {entry}(data, pos, nxt, st, depth + 1)",
                    f"d[{name!r}][k] = v",
                    "pos = nxt",
                ]
                branches.append(((meta.number << 3) | 2, body))
                continue
            branches += self._field_branches(
                meta.number,
                meta.proto_type,
                meta.unwrap,
                field_cls,
                name,
                repeated=meta.repeated,
                needs=needs,
            )
        defaults_name = self.const(defaults, "defaults")
        numbers_name = self.const(frozenset(numbers), "numbers")
        cls_name = self.const(cls, "cls")
        lines = [
            f"def {fname}(data, pos, end, st, depth):",
            "    if depth > MAX_DEPTH:",
            "        raise FallbackError",
            f"    obj = new({cls_name})",
            "    d = obj.__dict__",
            f"    d.update({defaults_name})",
            *("    " + line for line in fresh),
            "    while pos < end:",
            "        start = pos",
            "        tag = data[pos]",
            "        if tag < 128:",
            "            pos += 1",
            "        else:",
            "            tag, pos = varint(data, pos)",
        ]
        keyword = "if"
        for tag, body in branches:
            lines.append(f"        {keyword} tag == {tag}:")
            lines.extend(i3 + line for line in body)
            keyword = "elif"
        lines.append("        else:" if branches else "        if True:")
        lines.append(f"{i3}if (tag >> 3) in {numbers_name}:")
        lines.append(f"{i4}raise FallbackError  # a known field with another wire type")
        lines.append(f"{i3}pos = skip_unknown(data, start, pos, tag, end, d, st)")
        lines += ["    if pos != end:", "        raise FallbackError", "    return obj", ""]
        return "\n".join(lines), needs

    def _field_branches(
        self,
        number: int,
        ptype: str,
        unwrap: Any,
        field_cls: Any,
        name: str,
        *,
        repeated: bool,
        needs: list[Any],
    ) -> list[tuple[int, list[str]]]:
        """``(tag, lines)`` decoding one non-map field into ``d[name]`` (appending when
        ``repeated``; packed encoding accepted for repeated scalars)."""
        store = f"d[{name!r}].append(v)" if repeated else f"d[{name!r}] = v"
        if ptype in _LEN:
            if ptype == betterproto2.TYPE_STRING:
                value = "v = decode_str(data, pos, nxt)"
            elif ptype == betterproto2.TYPE_BYTES:
                value = "v = data[pos:nxt]"
            elif unwrap is not None:
                value = f"v = {self.const(unwrap, 'unwrap')}().parse(data[pos:nxt]).to_wrapped()"
            else:
                needs.append(field_cls)
                value = f"v = {self._decoder_name(field_cls)}(data, pos, nxt, st, depth + 1)"
            return [((number << 3) | 2, [*_LENGTH, value, store, "pos = nxt"])]
        if ptype in _FIXED:
            fmt, wire, width = _FIXED[ptype]
            read = f"unpack_from({fmt!r}, data, pos)[0]"
            one = [f"nxt = pos + {width}", "if nxt > end:", "    raise FallbackError"]
            one += [f"v = {read}", "pos = nxt", store]
            packed = ["while pos < nxt:", f"    items.append({read})", f"    pos += {width}"]
        else:
            convert = _VARINT_DECODE[ptype]
            if ptype == betterproto2.TYPE_ENUM:
                members = self.const({int(m): m for m in field_cls}, "members")
                convert = convert.format(
                    i="{i}", members=members, enum=self.const(field_cls, "enum")
                )
            steps = convert.format(i="").split("\n")
            wire = 0
            one = ["v = data[pos]", "if v < 128:", "    pos += 1", "else:"]
            one += ["    v, pos = varint(data, pos)", *steps, store]
            packed = ["while pos < nxt:", "    v, pos = varint(data, pos)"]
            packed += [*("    " + line for line in steps), "    items.append(v)"]
        branches = [((number << 3) | wire, one)]
        if repeated:
            body = [
                *_LENGTH,
                f"items = d[{name!r}]",
                *packed,
                "if pos != nxt:",
                "    raise FallbackError",
            ]
            branches.append(((number << 3) | 2, body))
        return branches

    def _map_entry(
        self, entry_cls: Any, key_meta: Any, value_meta: Any, value_cls: Any, needs: list[Any]
    ) -> str:
        """Name of a function decoding one map entry to ``(key, value)`` (betterproto2's
        defaults for a missing key or value; a missing message value marks the state unclean)."""
        fname = self.const(entry_cls, "entry") + "_e"
        if fname in self.ns:
            return fname
        entry_meta = _meta(entry_cls)
        key_default = entry_meta.default_gen["key"]()
        value_default = entry_meta.default_gen["value"]()
        lines = [
            f"def {fname}(data, pos, end, st, depth):",
            "    if depth > MAX_DEPTH:",
            "        raise FallbackError",
            f"    d = {{'key': {self.const(key_default, 'kdef')}, "
            f"'value': {self.const(value_default, 'vdef')}, '_unknown_fields': b''}}",
        ]
        # decode with a tiny generated decoder for the two fields
        fake = _EntryShape(key_meta, value_meta, value_cls)
        source, sub_needs = self._entry_body(fake)
        needs.extend(sub_needs)
        lines.extend(source)
        lines += [
            "    if pos != end:",
            "        raise FallbackError",
            "    if d['value'] is None:",
            "        st.clean = False",
            "    return d['key'], d['value']",
            "",
        ]
        exec(compile("\n".join(lines), "<protocol_py.wire map entry>", "exec"), self.ns)
        return fname

    def _entry_body(self, shape: _EntryShape) -> tuple[list[str], list[Any]]:
        needs: list[Any] = []
        lines = [
            "    while pos < end:",
            "        start = pos",
            "        tag = data[pos]",
            "        if tag < 128:",
            "            pos += 1",
            "        else:",
            "            tag, pos = varint(data, pos)",
        ]
        keyword = "if"
        fields: tuple[tuple[int, Any, Any], ...] = (
            (1, shape.key, None),
            (2, shape.value, shape.value_cls),
        )
        for number, meta, field_cls in fields:
            name = "key" if number == 1 else "value"
            for tag, body in self._field_branches(
                number, meta.proto_type, meta.unwrap, field_cls, name, repeated=False, needs=needs
            ):
                lines.append(f"        {keyword} tag == {tag}:")
                lines.extend(" " * 12 + line for line in body)
                keyword = "elif"
        lines += [
            "        elif (tag >> 3) in (1, 2):",
            "            raise FallbackError",
            "        else:",
            "            pos = skip_unknown(data, start, pos, tag, end, d, st)",
        ]
        return lines, needs

    # -- encoding ------------------------------------------------------------------------------

    def encoder(self, cls: type[Any]) -> Any:
        """The generated encoder of ``cls`` (built on first use)."""
        return self._get(cls, self.encoders, self._build_encoder)

    def _encoder_name(self, cls: type[Any]) -> str:
        return self.const(cls, "enc_of_") + "_e"

    def _build_encoder(self, cls: type[Any]) -> Any:
        return self._build(cls, self.encoders, self._encoder_source, self._encoder_name, "encoder")

    def _value_code(
        self, ptype: str, unwrap: Any, field_cls: Any, var: str, needs: list[Any]
    ) -> tuple[list[str], int]:
        """Lines computing ``b`` (the encoded value; without the length prefix) from ``var``,
        raising FallbackError for a value betterproto2 may treat otherwise; plus the wire type."""
        if ptype == betterproto2.TYPE_STRING:
            return [
                f"if type({var}) is not str:",
                "    raise FallbackError",
                f"b = {var}.encode()",
            ], 2
        if ptype == betterproto2.TYPE_BYTES:
            return [f"if type({var}) is not bytes:", "    raise FallbackError", f"b = {var}"], 2
        if ptype == betterproto2.TYPE_MESSAGE:
            if unwrap is not None:
                return [f"b = bytes({self.const(unwrap, 'unwrap')}().from_wrapped({var}))"], 2
            needs.append(field_cls)
            own = self._encoder_name(field_cls)
            cls_name = self.const(field_cls, "cls")
            return [
                f"if type({var}) is {cls_name}:",
                f"    b = {own}({var})",
                f"elif isinstance({var}, Message):",
                f"    b = encode_any({var})",
                "else:",
                "    raise FallbackError",
            ], 2
        if ptype in _FIXED:
            fmt, wire, _ = _FIXED[ptype]
            return [
                f"if not isinstance({var}, (int, float)):",
                "    raise FallbackError",
                f"b = {self.const(struct.Struct(fmt).pack, 'pack')}({var})",
            ], wire
        check = [f"if not isinstance({var}, int):", "    raise FallbackError"]
        if ptype in (betterproto2.TYPE_SINT32, betterproto2.TYPE_SINT64):
            return [
                *check,
                f"b = varint_bytes({var} << 1 if {var} >= 0 else ({var} << 1) ^ (~0))",
            ], 0
        return [*check, f"b = SMALL[{var}] if 0 <= {var} < 128 else varint_bytes({var})"], 0

    def _encoder_source(self, cls: type[Any]) -> tuple[str, list[type[Any]]]:
        meta_all = _meta(cls)
        fname = self._encoder_name(cls)
        needs: list[type[Any]] = []
        lines = [
            f"def {fname}(msg):",
            "    d = msg.__dict__",
            "    out = []",
            "    put = out.append",
        ]
        for name, meta in meta_all.meta_by_field_name.items():
            field_cls = meta_all.cls_by_field.get(name)
            lines.append(f"    v = d[{name!r}]")
            lines.append("    if v is not None:")
            body: list[str] = []
            if meta.map_meta is not None:
                key_meta, value_meta = meta.map_meta
                value_cls = meta_all.cls_by_field[f"{name}.value"]
                k_code, k_wire = self._value_code(key_meta.proto_type, None, None, "k", needs)
                v_code, v_wire = self._value_code(
                    value_meta.proto_type, value_meta.unwrap, value_cls, "x", needs
                )
                tag = varint_bytes((meta.number << 3) | 2)
                body += [
                    "if type(v) is not dict:",
                    "    raise FallbackError",
                    "for k, x in v.items():",
                    *("    " + line for line in k_code),
                    "    kb = b",
                    *("    " + line for line in v_code),
                    "    entry = b''.join((",
                    f"        {bytes([(1 << 3) | k_wire])!r},",
                    "        varint_bytes(len(kb)), kb," if k_wire == 2 else "        kb,",
                    f"        {bytes([(2 << 3) | v_wire])!r},",
                    "        varint_bytes(len(b)), b))" if v_wire == 2 else "        b))",
                    f"    put({tag!r})",
                    "    put(varint_bytes(len(entry)))",
                    "    put(entry)",
                ]
                lines.extend("        " + line for line in body)
                continue
            code, wire = self._value_code(meta.proto_type, meta.unwrap, field_cls, "v", needs)
            if meta.repeated:
                packed = wire != 2
                tag = varint_bytes((meta.number << 3) | 2)
                body += ["if type(v) is not list:", "    raise FallbackError", "if v:"]
                if packed:
                    body += ["    parts = []", "    for item in v:"]
                    code_item, _ = self._value_code(
                        meta.proto_type, meta.unwrap, field_cls, "item", needs
                    )
                    body += [*("        " + line for line in code_item), "        parts.append(b)"]
                    body += [
                        "    b = b''.join(parts)",
                        f"    put({tag!r})",
                        "    put(varint_bytes(len(b)))",
                        "    put(b)",
                    ]
                else:
                    code_item, _ = self._value_code(
                        meta.proto_type, meta.unwrap, field_cls, "item", needs
                    )
                    body += [
                        "    for item in v:",
                        *("        " + line for line in code_item),
                        f"        put({tag!r})",
                        "        put(SMALL[len(b)] if len(b) < 128 else varint_bytes(len(b)))",
                        "        put(b)",
                    ]
                lines.extend("        " + line for line in body)
                continue
            tag = varint_bytes((meta.number << 3) | wire)
            plain = (
                not (meta.optional or meta.group) and meta.proto_type != betterproto2.TYPE_MESSAGE
            )
            if plain:
                py = {
                    betterproto2.TYPE_STRING: "str",
                    betterproto2.TYPE_BYTES: "bytes",
                    betterproto2.TYPE_BOOL: "bool",
                }.get(meta.proto_type)
                if py is not None:
                    body += [f"if type(v) is not {py}:", "    raise FallbackError"]
                default = self.const(meta_all.default_gen[name](), "default")
                body += [f"if v != {default}:"]
                indent = "    "
            else:
                indent = ""
            body += [indent + line for line in code]
            body += [indent + f"put({tag!r})"]
            if wire == 2:
                body += [indent + "put(SMALL[len(b)] if len(b) < 128 else varint_bytes(len(b)))"]
            body += [indent + "put(b)"]
            lines.extend("        " + line for line in body)
        lines += [
            "    u = d.get('_unknown_fields')",
            "    if u:",
            "        put(u)",
            "    return b''.join(out)",
            "",
        ]
        return "\n".join(lines), needs


class _EntryShape:
    __slots__ = ("key", "value", "value_cls")

    def __init__(self, key: Any, value: Any, value_cls: Any) -> None:
        self.key = key
        self.value = value
        self.value_cls = value_cls


GENERATOR: Final = _Generator()


def encode_any(message: betterproto2.Message) -> bytes:
    """Encode a message of any generated class with its generated encoder."""
    encoded: bytes = GENERATOR.encoder(type(message))(message)
    return encoded


GENERATOR.ns["encode_any"] = encode_any
