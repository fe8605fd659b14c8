"""Protobuf's merge of a singular message field sent more than once, for betterproto2 classes.

A protobuf parser that meets a singular message field more than once merges the occurrences:
the field holds the message parsed from their payloads concatenated (singular scalars of the
later occurrence replace the earlier, sub-messages merge, repeated fields concatenate); a
oneof holds its last member only, and a message member merges just the occurrences since the
oneof last switched to it (https://protobuf.dev/programming-guides/encoding/#last-one-wins).
upb, Go and every conforming runtime read such input so: a kernel may append a field to a
request it serialized before ("merging by concatenation") and expect the merge.

betterproto2 0.10's parser keeps the last occurrence of a message field whole (dropping what
the earlier ones set) and keeps every member of a oneof that was sent. :func:`merged`
rewrites an encoding so that each singular message field and each oneof occurs at most once,
its payload the concatenation protobuf merges; every other field keeps its bytes and order
(repeated elements, map entries and unknown fields in wire order). A parser that keeps the
last occurrence then reads what protobuf's merging parsers read.
:func:`protocol_py.codec.wire.decode_report` applies it when its generated decoder meets a
second occurrence (:class:`~protocol_py.codec.wire_gen.NeedsMergeError`), and before every
parse it hands to betterproto2.

Bounds: the rewrite reads each field of the input once, at its own level, and at most
:data:`MAX_MERGE_FIELDS` fields in all (:class:`MergeBudgetError`, a
:class:`~protocol_py.codec.wire_gen.DecodeBudgetError`, past it). Nesting deeper than
:data:`MAX_MERGE_DEPTH` message levels, a group, a field running past its message or a known
field sent with another wire type leaves the input as it is (the parser then judges it as
sent: the server refuses such a body before it gets here). The output is no longer than the
input and is copied out of it once, at the end, however deep the merge: each level keeps the
runs it leaves as they are as offsets, and a rewritten child as its pieces
(:data:`MAX_ROPE_ITEMS`), so the rewrite holds the input, its output and two offsets per
occurrence merged (bounded by :data:`MAX_MERGE_FIELDS`) while it runs.
"""

from __future__ import annotations

import threading
from typing import Any, Final

import betterproto2

from protocol_py.codec import metadata
from protocol_py.codec.wire_gen import (
    MAX_DECODED_OBJECTS,
    DecodeBudgetError,
    FallbackError,
    length_prefix,
    value_end,
    varint,
    varint_bytes,
)

__all__ = ["MAX_MERGE_DEPTH", "MAX_MERGE_FIELDS", "MAX_ROPE_ITEMS", "MergeBudgetError", "merged"]

MAX_MERGE_DEPTH: Final = 100
"""Deepest message nesting the rewrite follows, in message levels (protobuf's default
recursion limit); deeper input is left as it is."""

MAX_MERGE_FIELDS: Final = 2 * MAX_DECODED_OBJECTS
"""Most fields (at every level together) one rewrite reads: 2,000,000, one to two seconds of
one core at worst (0.5-1 us a field); a 601-message conversation of 1.1 MB holds about 9,000."""

_RAW: Final = 0  # copied as it is: scalars, strings, bytes, repeated scalars, unknown fields
_EACH: Final = 1  # an element of a repeated message field or a map entry: rewritten on its own
_SINGLE: Final = 2  # a singular message field outside a oneof: its occurrences merged
_MEMBER: Final = 3  # a oneof member: the oneof's last member kept

_VARINT_TYPES: Final = frozenset(
    {
        betterproto2.TYPE_INT32,
        betterproto2.TYPE_INT64,
        betterproto2.TYPE_UINT32,
        betterproto2.TYPE_UINT64,
        betterproto2.TYPE_SINT32,
        betterproto2.TYPE_SINT64,
        betterproto2.TYPE_BOOL,
        betterproto2.TYPE_ENUM,
    }
)
_FIXED64_TYPES: Final = frozenset(
    {betterproto2.TYPE_DOUBLE, betterproto2.TYPE_FIXED64, betterproto2.TYPE_SFIXED64}
)
_FIXED32_TYPES: Final = frozenset(
    {betterproto2.TYPE_FLOAT, betterproto2.TYPE_FIXED32, betterproto2.TYPE_SFIXED32}
)


class MergeBudgetError(DecodeBudgetError):
    """The input holds more fields than the merge reads (:data:`MAX_MERGE_FIELDS`)."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.args = (f"more than {limit} fields to merge",)


class _UnmergeableError(Exception):
    """The input is not well-formed enough to rewrite: it is left as it is."""


# A plan: field number -> [kind, sub-plan (None: nothing below can need a rewrite), oneof
# name, the wire types the field may come with, whether it holds a message]. Built once per
# class, published whole.
_Plan = dict[int, list[Any]]
_PLANS: dict[Any, _Plan] = {}
_PLANS_LOCK: Final = threading.Lock()


def _wire_types(field: metadata.Field) -> frozenset[int]:
    ptype = field.proto_type
    if ptype in _VARINT_TYPES:
        wire = 0
    elif ptype in _FIXED64_TYPES:
        wire = 1
    elif ptype in _FIXED32_TYPES:
        wire = 5
    else:
        return frozenset({2})
    return frozenset({wire, 2}) if field.repeated else frozenset({wire})


def _plan(cls: type[betterproto2.Message]) -> _Plan:
    found = _PLANS.get(cls)
    if found is not None:
        return found
    with _PLANS_LOCK:
        found = _PLANS.get(cls)
        if found is not None:
            return found
        building: dict[Any, _Plan] = {}
        plan = _build(cls, building)
        for plan_of in building.values():  # a plan that can change nothing is not entered
            for entry in plan_of.values():
                if entry[1] is not None and not _can_change(entry[1]):
                    entry[1] = None
        _PLANS.update(building)
        return plan


def _can_change(plan: _Plan) -> bool:
    return any(entry[0] != _RAW for entry in plan.values())


def _build(key: Any, building: dict[Any, _Plan]) -> _Plan:
    """The plan of a message class (or of a map field's entries: ``key`` a Field), filled in
    ``building`` with every plan it reaches (a class reached again shares its plan)."""
    plan = _PLANS.get(key) or building.get(key)
    if plan is not None:
        return plan
    plan = building[key] = {}
    if isinstance(key, metadata.Field):  # a map entry: key 1, value 2
        assert key.map_key is not None and key.map_value is not None
        plan[1] = [_RAW, None, None, _wire_types(key.map_key), False]
        value = key.map_value
        if value.proto_type == betterproto2.TYPE_MESSAGE:
            sub = _build(_message_class(value), building)
            plan[2] = [_SINGLE, sub, None, frozenset({2}), True]
        else:
            plan[2] = [_RAW, None, None, _wire_types(value), False]
        return plan
    for field in metadata.fields(key).values():
        wires = _wire_types(field)
        if field.map_value is not None:
            plan[field.number] = [_EACH, _build(field, building), None, wires, True]
        elif field.proto_type != betterproto2.TYPE_MESSAGE:
            kind = _MEMBER if field.group is not None else _RAW
            plan[field.number] = [kind, None, field.group, wires, False]
        else:
            sub = _build(_message_class(field), building)
            kind = _EACH if field.repeated else _MEMBER if field.group is not None else _SINGLE
            plan[field.number] = [kind, sub, field.group, wires, True]
    return plan


def _message_class(field: metadata.Field) -> Any:
    return field.unwrap() if field.unwrap is not None else field.cls


class _Budget:
    __slots__ = ("left", "limit")

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.limit = limit


def merged(cls: type[betterproto2.Message], data: bytes, *, limit: int | None = None) -> bytes:
    """``data`` (an encoded ``cls``) with each singular message field and each oneof
    occurring at most once, as protobuf merges them (see the module docstring); ``data``
    itself when it holds nothing to merge, or when it is not well-formed enough to rewrite.

    Args:
        cls: A generated message class.
        data: Its encoding.
        limit: Most fields read, at every level together (default
            :data:`MAX_MERGE_FIELDS`).

    Raises:
        MergeBudgetError: ``data`` holds more than ``limit`` fields.
    """
    budget = _Budget(MAX_MERGE_FIELDS if limit is None else limit)
    over = False
    try:
        out = _rewrite(_plan(cls), data, [0, len(data)], budget, 1)
    except (_UnmergeableError, FallbackError, IndexError):
        return data
    except MergeBudgetError:
        over = True  # raised again below, outside this block: this one's traceback holds
        # the rewrite's frames and their lists of spans (millions of ints)
    if over:
        raise MergeBudgetError(budget.limit)
    return data if out is None else out.finish()


MAX_ROPE_ITEMS: Final = 1024
"""Most pieces one level's rewrite holds before it copies them into its buffer: runs of the
input are kept as offsets and rewritten children as their own pieces, so a rewrite copies the
input once, at the end, however deep the merge; only a level holding more pieces than this
(a field sent thousands of times) copies them early, to bound the pieces held."""


class _Out:
    """One level's rewrite as a rope: runs of the input (adjacent runs joined) kept as
    ``(start, stop)`` offsets, headers and rewritten children as their pieces; copied out
    once by :meth:`finish` (or into ``buf`` when it holds over :data:`MAX_ROPE_ITEMS`
    pieces). ``size`` is its length in bytes."""

    __slots__ = ("buf", "data", "items", "run_start", "run_stop", "size")

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.buf: bytearray | None = None
        self.items: list[tuple[int, int] | bytes | bytearray] = []
        self.run_start = self.run_stop = -1
        self.size = 0

    def raw(self, start: int, stop: int) -> None:
        self.size += stop - start
        if start == self.run_stop:
            self.run_stop = stop
            return
        self.end_run()
        self.run_start, self.run_stop = start, stop

    def end_run(self) -> None:
        if self.run_start >= 0:
            self._add((self.run_start, self.run_stop))
            self.run_start = self.run_stop = -1

    def _add(self, item: tuple[int, int] | bytes | bytearray) -> None:
        self.items.append(item)
        if len(self.items) > MAX_ROPE_ITEMS:
            self.buf = self._copied(self.buf if self.buf is not None else bytearray())
            self.items.clear()

    def _copied(self, buf: bytearray) -> bytearray:
        data = self.data
        for item in self.items:
            buf += data[item[0] : item[1]] if isinstance(item, tuple) else item
        return buf

    def field(self, tag: int, child: _Out) -> None:
        self.end_run()
        child.end_run()
        head = varint_bytes(tag) + varint_bytes(child.size)
        self._add(head)
        self.size += len(head) + child.size
        if child.buf is not None:
            self._add(child.buf)
        for item in child.items:
            self._add(item)

    def joined(self, tag: int, spans: list[int]) -> None:
        """The field ``tag`` holding the concatenation of ``spans`` of the input."""
        self.end_run()
        pairs = range(0, len(spans), 2)
        length = sum(spans[i + 1] - spans[i] for i in pairs)
        head = varint_bytes(tag) + varint_bytes(length)
        self._add(head)
        self.size += len(head) + length
        for i in pairs:
            self._add((spans[i], spans[i + 1]))

    def finish(self) -> bytes:
        self.end_run()
        return bytes(self._copied(self.buf if self.buf is not None else bytearray()))


def _rewrite(
    plan: _Plan, data: bytes, spans: list[int], budget: _Budget, depth: int
) -> _Out | None:
    """The rewrite of one message whose encoding is the concatenation of the ``spans`` of
    ``data`` (start, stop pairs), or None when it needs none."""
    if depth > MAX_MERGE_DEPTH:
        raise _UnmergeableError
    out = _Out(data)
    singles: dict[int, list[Any]] = {}  # tag -> [start of the first, payload spans]
    oneofs: dict[str, list[Any]] = {}  # oneof -> [tag, start, stop, payload spans]
    changed = False
    for index in range(0, len(spans), 2):
        pos, end = spans[index], spans[index + 1]
        while pos < end:
            budget.left -= 1
            if budget.left < 0:
                raise MergeBudgetError(budget.limit)
            start = pos
            tag = data[pos]
            if tag < 128:
                pos += 1
            else:
                tag, pos = varint(data, pos)
            wire = tag & 7
            payload = pos
            if wire == 2:
                size, payload = length_prefix(data, pos)
                pos = payload + size
            else:
                pos = value_end(data, pos, wire)  # FallbackError for a group
            if pos > end:
                raise _UnmergeableError
            entry = plan.get(tag >> 3)
            if entry is None or entry[0] == _RAW:
                if entry is not None and wire not in entry[3]:
                    raise _UnmergeableError
                out.raw(start, pos)
                continue
            kind, sub, group, wires, is_message = entry
            if wire not in wires:
                raise _UnmergeableError
            if kind == _EACH:
                child = _rewrite(sub, data, [payload, pos], budget, depth + 1) if sub else None
                if child is None:
                    out.raw(start, pos)
                else:
                    changed = True
                    out.field(tag, child)
            elif kind == _SINGLE:
                single = singles.get(tag)
                if single is None:
                    singles[tag] = [start, [payload, pos]]
                else:
                    changed = True
                    single[1] += (payload, pos)
            else:
                state = oneofs.get(group)
                if state is None:
                    oneofs[group] = [tag, start, pos, [payload, pos]]
                    continue
                changed = True
                if state[0] == tag and is_message:
                    state[3] += (payload, pos)  # the same message member: merged
                else:  # another member (or a scalar again): the last one wins
                    state[:] = [tag, start, pos, [payload, pos]]
    out.end_run()
    for tag, (start, pieces) in singles.items():
        sub = plan[tag >> 3][1]
        child = _rewrite(sub, data, pieces, budget, depth + 1) if sub else None
        if child is not None:
            changed = True
            out.field(tag, child)
        elif len(pieces) == 2:  # one occurrence, as sent
            out.raw(start, pieces[1])
        else:
            out.joined(tag, pieces)
    for tag, start, stop, pieces in oneofs.values():
        _, sub, _, _, is_message = plan[tag >> 3]
        child = _rewrite(sub, data, pieces, budget, depth + 1) if is_message and sub else None
        if child is not None:
            changed = True
            out.field(tag, child)
        elif len(pieces) == 2:  # the last occurrence, as sent
            out.raw(start, stop)
        else:
            out.joined(tag, pieces)
    return out if changed else None
