"""Per-class encode/decode functions for :mod:`protocol_py.codec.wire`, generated at first use.

For each generated betterproto2 class, the field table (betterproto2's own metadata, read
through :func:`protocol_py.codec.metadata.fields`: numbers, proto types, repeated/optional/oneof,
maps, wrapped well-known types) is turned into the source
of two straight-line Python functions, compiled with ``exec`` once per class (as dataclasses
and attrs build their methods): one decodes the class's fields from a buffer slice in place,
one encodes an instance. They mirror betterproto2's own ``load`` and ``__bytes__`` rule by rule
and raise :class:`FallbackError` for anything else, so :mod:`protocol_py.codec.wire` can hand
such input back to betterproto2.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final, NamedTuple

import betterproto2

from protocol_py.codec import metadata
from protocol_py_gen.google.protobuf import Duration

MAX_FAST_DEPTH: Final = 64
"""Deepest message nesting, in message levels, decoded by the generated functions; a deeper
message goes to betterproto2 (same result) and is reported as not clean."""

INLINE_LEVELS: Final = 2
"""Sub-message levels decoded inline in their parent's generated function (no call per
sub-message); deeper levels, and a class inside itself, call that class's decoder."""

ENCODE_INLINE_LEVELS: Final = 3
"""Sub-message levels encoded inline in their parent's generated encoder (no call per
sub-message: a request's message, its content blocks and their blocks); deeper levels, and a
class inside itself, call that class's encoder."""

LARGE_STRING: Final = 1 << 20
"""Strings of this many bytes or more (1 MiB) are decoded from a memoryview, without the
intermediate bytes copy."""


MAX_DECODED_OBJECTS: Final = 1_000_000
"""Most elements of repeated message, string and bytes fields plus map entries one decode may
create, and unknown fields it may read (all fields of the message, at any depth, counted
together), in elements. An unknown field makes no object, but each takes a step of the
decoder (a body of 3-byte unknown fields would otherwise take one step every 3 bytes of its
64 MiB). Every other object hangs from one of these, the top-level message or a chain of
singular sub-messages (at most :data:`MAX_FAST_DEPTH` deep), so this bounds a decoded
request's objects whatever its shape: a body of tiny elements (two bytes each: ``0a 00``)
otherwise turns each wire byte into over 100 bytes of Python objects (1 MiB of empty
``messages`` would take over 1 GiB). A request of 100,000 one-block messages (4.4 MB) counts
200,000."""


LONG_TEXT_CHARS: Final = 1 << 20
"""Strings of this many characters or more (1 Mi) are encoded as a :class:`LongText` part,
their UTF-8 bytes made this many characters at a time, never by one ``str.encode`` call over
the whole text (encoding tens of megabytes at once holds the interpreter for tens of
milliseconds)."""


class LongText:
    """An encoder part standing for the UTF-8 bytes of one long string (at least
    :data:`LONG_TEXT_CHARS` characters): ``len()`` is their byte count; :meth:`pieces` yields
    them in order, :data:`LONG_TEXT_CHARS` characters at a time (an ASCII text, whose byte count
    is its length, is encoded only then; another is encoded once, up front, in those pieces).

    Raises:
        UnicodeEncodeError: for a string holding a lone surrogate, as ``str.encode`` would.
    """

    __slots__ = ("chunks", "size", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.chunks: list[bytes] | None = None
        if text.isascii():
            self.size = len(text)
        else:
            self.chunks = [
                text[i : i + LONG_TEXT_CHARS].encode() for i in range(0, len(text), LONG_TEXT_CHARS)
            ]
            self.size = sum(len(chunk) for chunk in self.chunks)

    def __len__(self) -> int:
        return self.size

    def pieces(self) -> Iterator[bytes]:
        """The UTF-8 bytes, at most :data:`LONG_TEXT_CHARS` characters' worth per piece."""
        if self.chunks is not None:
            yield from self.chunks
            return
        text = self.text
        for i in range(0, len(text), LONG_TEXT_CHARS):
            yield text[i : i + LONG_TEXT_CHARS].encode()


def flat_parts(out: list[Any]) -> Iterator[bytes]:
    """The bytes of encoder parts ``out`` in order, each :class:`LongText` as its pieces."""
    for part in out:
        if type(part) is LongText:
            yield from part.pieces()
        else:
            yield part


class FallbackError(Exception):
    """The generated code does not cover this input: betterproto2 handles the whole message."""


class NeedsMergeError(FallbackError):
    """A singular message field (or a oneof) occurs more than once: protobuf merges the
    occurrences (:mod:`protocol_py.codec.field_merge`), which the generated code leaves to
    :func:`protocol_py.codec.wire.decode_report`."""


class DecodeBudgetError(ValueError):
    """The message holds more than the decode's budget of elements
    (:data:`MAX_DECODED_OBJECTS` by default); never handed to betterproto2 (which has no
    budget)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} repeated elements and map entries")
        self.limit = limit


class State:
    """Per-call decoding state: ``clean`` stays True while every enum number is a known member
    and every map entry carries its message value; ``unknown`` turns True at the first field
    number the class does not know (kept in ``_unknown_fields``); ``left`` counts down the
    repeated elements and map entries the decode may still create
    (:class:`DecodeBudgetError` past zero)."""

    __slots__ = ("clean", "left", "limit", "unknown")

    def __init__(self, limit: int = MAX_DECODED_OBJECTS) -> None:
        self.clean = True
        self.unknown = False
        self.left = limit
        self.limit = limit


def over_budget(st: State) -> None:
    """Raise :class:`DecodeBudgetError` for ``st`` (called by the generated code)."""
    raise DecodeBudgetError(st.limit)


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


def length_prefix(data: bytes, pos: int) -> tuple[int, int]:
    """(length, next position) of the length prefix of a length-delimited field at ``pos``:
    the one- and two-byte prefixes (lengths up to 16 KiB, nearly every field) read inline,
    longer ones by :func:`varint`. IndexError past the end, as :func:`varint`."""
    size = data[pos]
    if size < 0x80:
        return size, pos + 1
    second = data[pos + 1]
    if second < 0x80:
        return (size & 0x7F) | second << 7, pos + 2
    return varint(data, pos)


SMALL: Final = [bytes([i]) for i in range(128)]

TWO_BYTE_LENGTHS: Final = 4096
"""Lengths below this (4 KiB) take their two-byte varint from :data:`TWO_BYTE` when encoding
(a table of about 170 KB); longer ones are computed."""

TWO_BYTE: Final = tuple(
    bytes((n & 0x7F | 0x80, n >> 7)) if n >= 128 else b"" for n in range(TWO_BYTE_LENGTHS)
)
"""The varint of each length 128 to :data:`TWO_BYTE_LENGTHS` - 1, by length (empty below 128:
those have one-byte heads of their own)."""


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


def value_end(data: bytes, pos: int, wire: int) -> int:
    """Position after the value of wire type ``wire`` starting at ``pos`` (it may lie past
    the buffer: the caller checks); FallbackError for a group."""
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
    return pos


def skip_field(data: bytes, pos: int, tag: int, end: int, st: State) -> int:
    """Position after the unknown field whose tag ended at ``pos`` (``st.unknown`` is set);
    the caller keeps its raw bytes as betterproto2 does (``_unknown_fields``)."""
    st.unknown = True
    pos = value_end(data, pos, tag & 7)
    if pos > end:
        raise FallbackError
    return pos


def decode_str(data: bytes, pos: int, nxt: int) -> str:
    """UTF-8 text of ``data[pos:nxt]``."""
    if nxt - pos < LARGE_STRING:
        return data[pos:nxt].decode("utf-8")
    return str(memoryview(data)[pos:nxt], "utf-8")


_MASK64: Final = "v &= 0xFFFFFFFFFFFFFFFF"
_SIGN64: Final = "if v >= 0x8000000000000000: v -= 0x10000000000000000"
_VARINT_DECODE: Final = {
    # proto type: (steps for a varint of 2+ bytes, steps for every varint); a one-byte
    # varint (0-127) needs no masking nor sign
    betterproto2.TYPE_INT32: (["v &= 0xFFFFFFFF", "if v >= 0x80000000: v -= 0x100000000"], []),
    betterproto2.TYPE_INT64: ([_MASK64, _SIGN64], []),
    betterproto2.TYPE_UINT32: (["v &= 0xFFFFFFFF"], []),
    betterproto2.TYPE_UINT64: ([_MASK64], []),
    betterproto2.TYPE_SINT32: (["v &= 0xFFFFFFFF"], ["v = (v >> 1) ^ (-(v & 1))"]),
    betterproto2.TYPE_SINT64: ([_MASK64], ["v = (v >> 1) ^ (-(v & 1))"]),
    betterproto2.TYPE_BOOL: ([], ["v = v > 0"]),
    betterproto2.TYPE_ENUM: (
        [_MASK64, _SIGN64],
        [
            "e = {members}.get(v)",
            "if e is None:",
            "    st.clean = False",
            "    e = {enum}(v)",
            "v = e",
        ],
    ),
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
    # a length prefix at ``pos`` (one- and two-byte varints inline) into ``n``, leaving ``pos``
    # at the payload and ``nxt`` after it
    "n = data[pos]",
    "if n < 128:",
    "    pos += 1",
    "elif data[pos + 1] < 128:",
    "    n = (n & 127) | (data[pos + 1] << 7)",
    "    pos += 2",
    "else:",
    "    n, pos = varint(data, pos)",
    "nxt = pos + n",  # last: a caller may set its own end instead
)


_SPEND: Final = (
    # one more repeated element or map entry (see MAX_DECODED_OBJECTS); ``bud`` is the
    # function's local copy of ``st.left``, written back around every call and at the end
    "bud -= 1",
    "if bud < 0:",
    "    over_budget(st)",
)

_UNPACK: Final = {fmt: struct.Struct(fmt).unpack_from for fmt, _, _ in _FIXED.values()}
_PACK: Final = {fmt: struct.Struct(fmt).pack for fmt, _, _ in _FIXED.values()}


class _Scope(NamedTuple):
    """Where generated decoding lines run: the name of the end position, the prefix of their
    locals, the message level below the function's own (``depth + level``), and the classes
    being decoded inline (outermost first)."""

    end: str
    prefix: str
    depth: int
    stack: tuple[type[Any], ...]


class _Field(NamedTuple):
    """One non-map field to decode into the local variable ``local``."""

    number: int
    ptype: str
    unwrap: Any
    cls: Any
    local: str
    repeated: bool
    oneof: str | None = None
    """The local flag of the field's oneof (set by its first member met), or None."""


class _EntryField(NamedTuple):
    """One map field: its entries' key and value fields, and the local dict."""

    key: metadata.Field
    value: metadata.Field
    local: str


class _Generator:
    """Builds and caches the functions; one instance per process (:data:`GENERATOR`)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.ns: dict[str, Any] = {
            "FallbackError": FallbackError,
            "NeedsMergeError": NeedsMergeError,
            "varint": varint,
            "varint_bytes": varint_bytes,
            "SMALL": SMALL,
            "TWO_BYTE": TWO_BYTE,
            "skip_field": skip_field,
            "decode_str": decode_str,
            "unpack_from": struct.unpack_from,
            "new": object.__new__,
            "over_budget": over_budget,
            "Message": betterproto2.Message,
            "LongText": LongText,
        }
        self.decoders: dict[type[Any], Any] = {}
        self.encoders: dict[type[Any], Any] = {}
        self.names: dict[Any, str] = {}
        self.inlined = 0
        self.heads: dict[int, str] = {}

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
            exec(
                compile(source, f"<protocol_py.codec.wire {what} {current.__name__}>", "exec"),
                self.ns,
            )
        for current, _ in built:
            table[current] = self.ns[name_of(current)]
        return table[cls]

    def _decoder_source(self, cls: type[Any]) -> tuple[str, list[type[Any]]]:
        """Source of the decoder function of ``cls`` (see :meth:`_body`)."""
        needs: list[type[Any]] = []
        body = self._body(cls, _Scope("end", "", 0, (cls,)), needs)
        lines = [
            f"def {self._decoder_name(cls)}(data, pos, end, st, depth):",
            f"    if depth > {MAX_FAST_DEPTH}:",
            "        raise FallbackError",
            "    bud = st.left",
            *("    " + line for line in body),
            "    st.left = bud",
            "    return o",
            "",
        ]
        return "\n".join(lines), needs

    def _body(self, cls: type[Any], scope: _Scope, needs: list[type[Any]]) -> list[str]:
        """Lines decoding one ``cls`` message from ``data[pos:<scope.end>]`` into the local
        ``<scope.prefix>o``, leaving ``pos`` at the end.

        Every field is read into a local variable; the instance is made at the end by setting
        its attributes in the order betterproto2's own constructor sets them (the fields, then
        ``_unknown_fields``), so CPython stores them as it does for a constructed instance
        (shared keys, no separate ``__dict__`` until one is asked for). Sub-messages of a class
        not already being decoded are decoded inline, :data:`INLINE_LEVELS` levels deep; deeper
        ones, and recursive ones, call their class's decoder (appended to ``needs``)."""
        p = scope.prefix
        init: list[str] = []
        branches: list[tuple[int, list[str]]] = []
        numbers = set()
        entries: list[str] = []
        flags: dict[str, str] = {}  # oneof -> its local flag
        for index, (name, meta) in enumerate(metadata.fields(cls).items()):
            numbers.add(meta.number)
            flag = None
            if meta.group is not None:
                flag = flags.get(meta.group)
                if flag is None:
                    flag = flags[meta.group] = f"{p}g{len(flags)}"
                    init.append(f"{flag} = False")
            local = f"{p}f{index}"
            entries.append(f"{p}o.{name} = {local}")
            field_cls = meta.cls
            if meta.repeated:
                init.append(f"{local} = []")
            elif meta.map_value is not None:
                init.append(f"{local} = {{}}")
            else:
                default = meta.default()
                if isinstance(default, (list, dict)):
                    raise TypeError(f"{cls.__name__}.{name}: mutable default")
                init.append(f"{local} = {self._literal(default)}")
            if meta.map_key is not None and meta.map_value is not None:
                body = self._map_entry(
                    _EntryField(meta.map_key, meta.map_value, local), scope, needs
                )
                branches.append(((meta.number << 3) | 2, body))
                continue
            branches += self._field_branches(
                _Field(
                    meta.number,
                    meta.proto_type,
                    meta.unwrap,
                    field_cls,
                    local,
                    meta.repeated,
                    flag,
                ),
                scope,
                needs,
            )
        numbers_name = self.const(frozenset(numbers), "numbers")
        entries.append(f"{p}o.{metadata.UNKNOWN_FIELDS} = b'' if {p}u is None else bytes({p}u)")
        return [
            *init,
            f"{p}u = None",
            *self._loop(branches, numbers_name, scope.end, f"{p}u"),
            f"if pos != {scope.end}:",
            "    raise FallbackError",
            f"{p}o = new({self.const(cls, 'cls')})",
            *entries,
        ]

    def _literal(self, value: Any) -> str:
        """Source text for the immutable default ``value`` (a literal when exact, else a
        namespace constant: enum members, floats, wrapped values)."""
        if value is None or type(value) in (str, bytes, int, bool):
            return repr(value)
        return self.const(value, "default")

    @staticmethod
    def _loop(
        branches: list[tuple[int, list[str]]], numbers: str, end: str, unknown: str | None
    ) -> list[str]:
        """The field loop over ``data[pos:end]``: a one-byte tag (field numbers 1-15) is
        dispatched at once; a longer one is read as a varint first. A known number with
        another wire type (or a tag in a longer encoding than needed) falls back; an unknown
        field counts as one element of the budget (:data:`MAX_DECODED_OBJECTS`) and its raw
        bytes are appended to the local named ``unknown`` (betterproto2's ``_unknown_fields``:
        None until the first, then a bytearray), or skipped when ``unknown`` is None."""
        short = [(tag, body) for tag, body in branches if tag < 128]
        long = [(tag, body) for tag, body in branches if tag >= 128]
        lines = [f"while pos < {end}:", "    tag = data[pos]", "    pos += 1"]
        keyword = "if"
        for tag, body in short:
            lines.append(f"    {keyword} tag == {tag}:")
            lines.extend("        " + line for line in body)
            keyword = "elif"
        rest = [
            "start = pos - 1",
            "if tag > 127:",
            "    tag, pos = varint(data, start)",
        ]
        keyword = "if"
        for tag, body in long:
            rest.append(f"{keyword} tag == {tag}:")
            rest.extend("    " + line for line in body)
            keyword = "elif"
        rest += [
            f"{keyword} (tag >> 3) in {numbers}:",
            "    raise FallbackError  # a known field with another wire type or tag encoding",
            "else:",
            f"    pos = skip_field(data, pos, tag, {end}, st)",
        ]
        rest += [f"    {line}" for line in _SPEND]  # an unknown field counts as an element
        if unknown is not None:  # appended to a bytearray: bytes += would copy it each time
            rest += [
                f"    if {unknown} is None:",
                f"        {unknown} = bytearray()",
                f"    {unknown} += data[start:pos]",
            ]
        lines.append("    else:" if short else "    if True:")
        lines.extend("        " + line for line in rest)
        return lines

    def _message_value(
        self, field_cls: type[Any], scope: _Scope, needs: list[type[Any]]
    ) -> tuple[list[str], str, bool]:
        """``(lines, expression, inline)`` decoding the sub-message ``data[pos:nxt]``: inline
        (see :meth:`_body`; ``pos`` is then left at its end) or by a call to its class's
        decoder (the expression)."""
        level = scope.depth + 1
        if field_cls in scope.stack or len(scope.stack) > INLINE_LEVELS:
            needs.append(field_cls)
            call = f"{self._decoder_name(field_cls)}(data, pos, nxt, st, depth + {level})"
            return [], call, False
        self.inlined += 1
        tag = f"i{self.inlined}_"
        inner = _Scope(f"{tag}end", tag, level, (*scope.stack, field_cls))
        lines = [
            f"{inner.end} = pos + n",
            f"if depth > {MAX_FAST_DEPTH - level}:",
            "    raise FallbackError",
            *self._body(field_cls, inner, needs),
        ]
        return lines, f"{tag}o", True

    def _field_branches(
        self, field: _Field, scope: _Scope, needs: list[type[Any]]
    ) -> list[tuple[int, list[str]]]:
        """:meth:`_field_value_branches`, each first raising :class:`NeedsMergeError` when the
        field is a singular message field already met, or a oneof member of a oneof already
        met (protobuf merges or replaces; betterproto2 would keep the last whole, or both)."""
        branches = self._field_value_branches(field, scope, needs)
        if field.oneof is not None:
            guard = [f"if {field.oneof}:", "    raise NeedsMergeError", f"{field.oneof} = True"]
        elif not field.repeated and field.ptype == betterproto2.TYPE_MESSAGE:
            guard = [f"if {field.local} is not None:", "    raise NeedsMergeError"]
        else:
            return branches
        return [(tag, [*guard, *body]) for tag, body in branches]

    def _field_value_branches(
        self, field: _Field, scope: _Scope, needs: list[type[Any]]
    ) -> list[tuple[int, list[str]]]:
        """``(tag, lines)`` decoding one non-map field of ``data[pos:<scope.end>]`` into its
        local variable (appending when repeated; packed encoding accepted for repeated
        scalars). A length or fixed-width value running past the end is not checked here:
        ``pos`` then ends past the end and the message's final check falls back."""
        local, ptype = field.local, field.ptype
        spend = _SPEND if field.repeated else []

        def store(expr: str) -> str:
            return f"{local}.append({expr})" if field.repeated else f"{local} = {expr}"

        length = _LENGTH
        if ptype in _LEN:
            if ptype == betterproto2.TYPE_STRING:
                large = "decode_str(data, pos, nxt)"
                value = [store(f"data[pos:nxt].decode() if n < {LARGE_STRING} else {large}")]
            elif ptype == betterproto2.TYPE_BYTES:
                value = [store("data[pos:nxt]")]
            elif field.unwrap is not None:
                unwrap = self.const(field.unwrap, "unwrap")
                value = [
                    f"if nxt > {scope.end}:",
                    "    raise FallbackError",
                    store(f"{unwrap}().parse(data[pos:nxt]).to_wrapped()"),
                ]
            else:
                lines, expr, inline = self._message_value(field.cls, scope, needs)
                if inline:  # the inline lines set their own end from ``n``
                    body = [*length[:-1], *lines, *spend, store(expr)]
                    return [((field.number << 3) | 2, body)]
                call = ["st.left = bud", store(expr), "bud = st.left", "pos = nxt"]
                return [((field.number << 3) | 2, [*length, *spend, *call])]
            return [((field.number << 3) | 2, [*length, *spend, *value, "pos = nxt"])]
        if ptype in _FIXED:
            fmt, wire, width = _FIXED[ptype]
            read = f"{self.const(_UNPACK[fmt], 'unpack')}(data, pos)[0]"
            one = [store(read), f"pos += {width}"]
            packed = ["while pos < nxt:", f"    items.append({read})", f"    pos += {width}"]
        else:
            wide, always = _VARINT_DECODE[ptype]
            names: dict[str, str] = {}
            if ptype == betterproto2.TYPE_ENUM:
                names = {"members": self.const({int(m): m for m in field.cls}, "members")}
                names["enum"] = self.const(field.cls, "enum")
                always = [line.format(**names) for line in always]
            wire = 0
            one = ["v = data[pos]", "if v < 128:", "    pos += 1", "else:"]
            one += ["    v, pos = varint(data, pos)", *("    " + line for line in wide)]
            if ptype == betterproto2.TYPE_ENUM and not field.repeated:  # straight to the local
                one += [
                    f"{local} = {names['members']}.get(v)",
                    f"if {local} is None:",
                    "    st.clean = False",
                    f"    {local} = {names['enum']}(v)",
                ]
            else:
                one += [*always, store("v")]
            packed = ["while pos < nxt:", "    v, pos = varint(data, pos)"]
            packed += [*("    " + line for line in (*wide, *always)), "    items.append(v)"]
        branches = [((field.number << 3) | wire, one)]
        if field.repeated:
            body = [
                *length,
                f"items = {local}",
                *packed,
                "if pos != nxt:",
                "    raise FallbackError",
            ]
            branches.append(((field.number << 3) | 2, body))
        return branches

    def _map_entry(self, field: _EntryField, scope: _Scope, needs: list[type[Any]]) -> list[str]:
        """Lines decoding one map entry (a length-delimited field at ``pos``) inline into the
        field's dict: betterproto2's defaults for a missing key or value (a missing message
        value marks the state unclean); the entry's own unknown fields are skipped (as
        betterproto2 drops them) but reported in ``st.unknown``; nesting counts the entry as
        one message level, as betterproto2's entry class is."""
        p = scope.prefix
        key, value, end = f"{p}k", f"{p}x", f"{p}ee"
        level = scope.depth + 1
        inner = _Scope(end, p, level, scope.stack)
        branches = self._field_branches(
            _Field(1, field.key.proto_type, field.key.unwrap, None, key, False), inner, needs
        )
        branches += self._field_branches(
            _Field(2, field.value.proto_type, field.value.unwrap, field.value.cls, value, False),
            inner,
            needs,
        )
        return [
            *_LENGTH[:-1],
            f"{end} = pos + n",
            f"if depth > {MAX_FAST_DEPTH - level}:",
            "    raise FallbackError",
            f"{key} = {self._literal(field.key.default())}",
            f"{value} = {self._literal(field.value.default())}",
            *self._loop(branches, "(1, 2)", end, None),
            f"if pos != {end}:",
            "    raise FallbackError",
            f"if {value} is None:",
            "    st.clean = False",
            *_SPEND,
            f"{field.local}[{key}] = {value}",
        ]

    # -- encoding ------------------------------------------------------------------------------

    def encoder(self, cls: type[Any]) -> Any:
        """The generated encoder of ``cls`` (built on first use): ``encoder(message, out)``
        appends the message's serialization to the list ``out`` in parts and returns its size
        in bytes, so nested messages are written once into one list (joined once at the top,
        :func:`encode_any`) instead of being joined again at every level."""
        return self._get(cls, self.encoders, self._build_encoder)

    def _encoder_name(self, cls: type[Any]) -> str:
        return self.const(cls, "enc_of_") + "_e"

    def _build_encoder(self, cls: type[Any]) -> Any:
        return self._build(cls, self.encoders, self._encoder_source, self._encoder_name, "encoder")

    def _heads(self, tag: int) -> str:
        """Name of a namespace tuple holding, for each value 0-127, the bytes of ``tag``
        followed by that one-byte varint (a length or a small scalar)."""
        name = self.heads.get(tag)
        if name is None:
            prefix = varint_bytes(tag)
            name = self.const(tuple(prefix + bytes([i]) for i in range(128)), f"h{tag}_")
            self.heads[tag] = name
        return name

    def _scalar_code(self, ptype: str, var: str) -> tuple[list[str], int]:
        """Lines computing ``b`` (the encoded scalar, without tag) from ``var``, raising
        FallbackError for a value betterproto2 may treat otherwise; plus the wire type."""
        if ptype in _FIXED:
            fmt, wire, _ = _FIXED[ptype]
            return [
                f"if not isinstance({var}, (int, float)):",
                "    raise FallbackError",
                f"b = {self.const(_PACK[fmt], 'pack')}({var})",
            ], wire
        check = [f"if not isinstance({var}, int):", "    raise FallbackError"]
        if ptype in (betterproto2.TYPE_SINT32, betterproto2.TYPE_SINT64):
            return [
                *check,
                f"b = varint_bytes({var} << 1 if {var} >= 0 else ({var} << 1) ^ (~0))",
            ], 0
        return [*check, f"b = SMALL[{var}] if 0 <= {var} < 128 else varint_bytes({var})"], 0

    def _length_head(self, tag: int, n: str, slot: str | None, size: str) -> list[str]:
        """Lines writing the tag and the length ``n`` of a length-delimited field: into the
        placeholder ``out[<slot>]`` (a sub-message, whose length is known after its parts),
        else appended (a string or bytes value, written right after); its byte count (head
        and payload) is added to the local ``size``. Lengths below 128 take the head from a
        table (:meth:`_heads`), those below :data:`TWO_BYTE_LENGTHS` their two-byte varint
        from :data:`TWO_BYTE`."""
        heads, head = self._heads(tag), varint_bytes(tag)

        def write(value: str) -> str:
            return f"out[{slot}] = {value}" if slot is not None else f"put({value})"

        return [
            f"if {n} < 128:",
            f"    {write(f'{heads}[{n}]')}",
            f"    {size} += {n} + {len(head) + 1}",
            f"elif {n} < {TWO_BYTE_LENGTHS}:",
            f"    {write(f'{head!r} + TWO_BYTE[{n}]')}",
            f"    {size} += {n} + {len(head) + 2}",
            "else:",
            f"    h = {head!r} + varint_bytes({n})",
            f"    {write('h')}",
            f"    {size} += {n} + len(h)",
        ]

    def _message_code(  # noqa: PLR0917
        self,
        field_cls: type[Any],
        number: int,
        var: str,
        size: str,
        level: int,
        stack: tuple[type[Any], ...],
        needs: list[Any],
    ) -> list[str]:
        """Lines appending field ``number`` holding the sub-message ``var`` of class
        ``field_cls``: a placeholder for its head, its parts, then the head. A sub-message of
        exactly ``field_cls`` is encoded inline (:data:`ENCODE_INLINE_LEVELS` levels below the
        function's own message, a class never inside itself) or by a call to its class's
        encoder; one of a subclass by :func:`encode_into`; anything else falls back."""
        slot = f"j{level}"
        inner = level + 1
        if field_cls in stack or len(stack) > ENCODE_INLINE_LEVELS:
            needs.append(field_cls)
            exact = [f"    n = {self._encoder_name(field_cls)}({var}, out)"]
        else:
            body = self._encode_body(field_cls, var, inner, (*stack, field_cls), needs)
            exact = [*("    " + line for line in body), f"    n = s{inner}"]
        return [
            f"{slot} = len(out)",
            "put(None)",
            f"if type({var}) is {self.const(field_cls, 'cls')}:",
            *exact,
            f"elif isinstance({var}, Message):",
            f"    n = encode_into({var}, out)",
            "else:",
            "    raise FallbackError",
            *self._length_head((number << 3) | 2, "n", slot, size),
        ]

    def _emit(  # noqa: PLR0917
        self,
        meta: metadata.Field | None,
        ptype: str,
        number: int,
        var: str,
        size: str,
        level: int,
        stack: tuple[type[Any], ...],
        needs: list[Any],
        checked: bool = False,
    ) -> list[str]:
        """Lines appending field ``number`` (of proto type ``ptype``; ``meta`` gives the class
        and wrapper of a message field) holding ``var`` (tag, length when delimited, value) to
        ``out`` and adding its byte count to the local ``size``; FallbackError for a value
        betterproto2 may treat otherwise (``checked``: the exact Python type of a string or
        bytes value was checked already)."""
        if ptype in _LEN:
            unwrap = meta.unwrap if meta is not None else None
            if ptype == betterproto2.TYPE_MESSAGE and unwrap is None:
                assert meta is not None
                return self._message_code(meta.cls, number, var, size, level, stack, needs)
            check: list[str] = []
            if ptype == betterproto2.TYPE_STRING:
                if not checked:
                    check = [f"if type({var}) is not str:", "    raise FallbackError"]
                value = f"b = {var}.encode() if len({var}) < {LONG_TEXT_CHARS} else LongText({var})"
            elif ptype == betterproto2.TYPE_BYTES:
                if not checked:
                    check = [f"if type({var}) is not bytes:", "    raise FallbackError"]
                value = f"b = {var}"
            elif unwrap is not None and unwrap() is Duration:  # betterproto2: see durations
                from protocol_py.codec import durations  # noqa: PLC0415 (it imports this module)

                value = f"b = {self.const(durations.encode, 'duration')}({var})"
            else:
                value = f"b = bytes({self.const(unwrap, 'unwrap')}().from_wrapped({var}))"
            tag = (number << 3) | 2
            return [*check, value, "n = len(b)", *self._length_head(tag, "n", None, size), "put(b)"]
        code, wire = self._scalar_code(ptype, var)
        tag = (number << 3) | wire
        head = varint_bytes(tag)
        if wire == 0 and ptype not in (betterproto2.TYPE_SINT32, betterproto2.TYPE_SINT64):
            return [
                *code[:2],  # the type check
                f"if 0 <= {var} < 128:",
                f"    put({self._heads(tag)}[{var}])",
                f"    {size} += {len(head) + 1}",
                "else:",
                f"    b = varint_bytes({var})",
                f"    put({head!r})",
                "    put(b)",
                f"    {size} += {len(head)} + len(b)",
            ]
        return [*code, f"put({head!r})", "put(b)", f"{size} += {len(head)} + len(b)"]

    def _encoder_source(self, cls: type[Any]) -> tuple[str, list[type[Any]]]:
        """Source of the encoder function of ``cls`` (see :meth:`_encode_body`)."""
        needs: list[type[Any]] = []
        body = self._encode_body(cls, "m", 0, (cls,), needs)
        lines = [
            f"def {self._encoder_name(cls)}(m, out):",
            "    put = out.append",
            *("    " + line for line in body),
            "    return s0",
            "",
        ]
        return "\n".join(lines), needs

    def _encode_body(
        self,
        cls: type[Any],
        var: str,
        level: int,
        stack: tuple[type[Any], ...],
        needs: list[type[Any]],
    ) -> list[str]:
        """Lines appending the fields of the ``cls`` message ``var`` (exactly of that class)
        to ``out`` in field order, then its unknown fields, their byte count in the local
        ``s<level>``. The locals of a message ``level`` levels below the function's own end in
        that number, so an inline sub-message's lines never overwrite its parent's."""
        size = f"s{level}"
        v, item = f"v{level}", f"t{level}"
        lines = [f"{size} = 0"]
        for name, meta in metadata.fields(cls).items():
            lines.append(f"{v} = {var}.{name}")
            body: list[str] = []
            ptype = meta.proto_type
            if meta.map_key is not None and meta.map_value is not None:
                key_meta, value_meta = meta.map_key, meta.map_value
                key, value, entry, slot = f"k{level}", f"x{level}", f"es{level}", f"q{level}"
                key_code = self._emit(None, key_meta.proto_type, 1, key, entry, level, stack, needs)
                value_code = self._emit(
                    value_meta, value_meta.proto_type, 2, value, entry, level, stack, needs
                )
                lines += [
                    f"if type({v}) is dict:",
                    f"    for {key}, {value} in {v}.items():",
                    f"        {slot} = len(out)",
                    "        put(None)",
                    f"        {entry} = 0",
                    *("        " + line for line in (*key_code, *value_code)),
                    *(
                        "        " + line
                        for line in self._length_head((meta.number << 3) | 2, entry, slot, size)
                    ),
                    f"elif {v} is not None:",
                    "    raise FallbackError",
                ]
                continue
            if meta.repeated:
                if ptype not in _LEN:  # packed
                    code_item, _ = self._scalar_code(ptype, item)
                    packed = self._emit(
                        None,
                        betterproto2.TYPE_BYTES,
                        meta.number,
                        "pk",
                        size,
                        level,
                        stack,
                        needs,
                        checked=True,
                    )
                    body += [
                        "parts = []",
                        f"for {item} in {v}:",
                        *("    " + line for line in code_item),
                        "    parts.append(b)",
                        "pk = b''.join(parts)",
                        *packed,
                    ]
                else:
                    emit = self._emit(meta, ptype, meta.number, item, size, level, stack, needs)
                    body += [f"for {item} in {v}:", *("    " + line for line in emit)]
                lines += [
                    f"if type({v}) is list:",
                    f"    if {v}:",
                    *("        " + line for line in body),
                    f"elif {v} is not None:",
                    "    raise FallbackError",
                ]
                continue
            plain = not (meta.optional or meta.group) and ptype != betterproto2.TYPE_MESSAGE
            py = {
                betterproto2.TYPE_STRING: "str",
                betterproto2.TYPE_BYTES: "bytes",
                betterproto2.TYPE_BOOL: "bool",
            }.get(ptype)
            if plain and py is not None:
                # exactly str, bytes or bool: only the default ("", b"", False) is false
                emit = self._emit(
                    meta, ptype, meta.number, v, size, level, stack, needs, checked=True
                )
                lines += [
                    f"if type({v}) is {py}:",
                    f"    if {v}:",
                    *("        " + line for line in emit),
                    f"elif {v} is not None:",
                    "    raise FallbackError",
                ]
                continue
            emit = self._emit(meta, ptype, meta.number, v, size, level, stack, needs)
            if plain:
                default = self.const(meta.default(), "default")
                emit = [f"if {v} != {default}:", *("    " + line for line in emit)]
            lines += [f"if {v} is not None:", *("    " + line for line in emit)]
        lines += [
            f"u = {var}.{metadata.UNKNOWN_FIELDS}",
            "if u:",
            "    put(u)",
            f"    {size} += len(u)",
        ]
        return lines


GENERATOR: Final = _Generator()


def encode_into(message: betterproto2.Message, out: list[Any]) -> int:
    """Append the serialization of a message of any generated class to ``out`` in parts;
    return its size in bytes."""
    size: int = GENERATOR.encoder(type(message))(message, out)
    return size


def encode_any(message: betterproto2.Message) -> bytes:
    """Encode a message of any generated class with its generated encoder (one join of the
    parts; a :class:`LongText` part joined from its pieces)."""
    out: list[Any] = []
    encode_into(message, out)
    try:
        return b"".join(out)
    except TypeError:  # a LongText part (a string of LONG_TEXT_CHARS characters or more)
        return b"".join(flat_parts(out))


GENERATOR.ns["encode_into"] = encode_into
