"""Every public function of the rule modules (structs, protojson, validation, routing, pricing,
accumulate, errors) answers bad input with a typed ProtocolError (or violations), never a bare
KeyError/TypeError/IndexError/AttributeError (brief: "Bad input").

Bad input is generated, not listed: every positional argument replaced by None and by values of
the wrong type, and every field of a populated message (at every depth, from the betterproto2
field metadata) set to None and to wrongly typed values, one at a time."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import betterproto2
import pytest

from protocol_py.codec import protojson, structs, type_check
from protocol_py.errors import ProtocolError, ValidationError, Violation, errors_only
from protocol_py.rules.accumulate import StreamAccumulator, accumulate
from protocol_py.rules.capabilities import validate_capabilities, validate_model_spec
from protocol_py.rules.cost import cost, format_usd, prompt_tokens
from protocol_py.rules.documents import detect_kind, load_document, validate_document
from protocol_py.rules.pricing import PricingTable, validate_pricing
from protocol_py.rules.request import validate_request, validate_request_shape
from protocol_py.rules.routing import route
from protocol_py.rules.stream_order import StreamOrderChecker
from protocol_py.rules.timestamps import parse_timestamp
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol_py_gen.google.protobuf import Struct, Value
from protocol_py_gen.model.v1 import (
    Capabilities,
    ModelTarget,
    Pricing,
    PricingTier,
    StreamCompletionRequest,
    StreamEvent,
    StreamMetadata,
    TextDelta,
    Usage,
)

from ..schema.test_messages import populate
from .test_validation import make_request, make_spec

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

# Wrong values of every shape: None, each JSON/Python scalar type, containers, foreign objects.
BAD: tuple[Any, ...] = (
    None,
    "x",
    -3,
    2.5,
    float("nan"),
    True,
    b"\xff",
    [],
    {},
    object(),
    [None],
    [object()],
    {"k": object()},
    Struct(),
)


def outcome(call: Callable[[], Any]) -> None:
    """Run ``call``; a return value or a ProtocolError is fine, anything else fails the test."""
    try:
        result = call()
        if isinstance(result, list):
            assert all(isinstance(v, Violation) for v in result if not isinstance(result, str))
    except ProtocolError:
        pass


def field_slots(
    message: betterproto2.Message, path: str = "", depth: int = 0
) -> Iterator[tuple[str, Any, str, Any]]:
    """(path, owner, attribute or index, current value) of every field slot, depth-first:
    plain fields, list elements and map values, down to nested messages."""
    if depth > 6 or type(message).__module__.startswith("protocol_py_gen.google"):
        return
    for field in dataclasses.fields(message):
        value = getattr(message, field.name)
        where = f"{path}.{field.name}" if path else field.name
        yield where, message, field.name, value
        items: list[tuple[str, Any]] = []
        if isinstance(value, list):
            items = [(f"{where}[{i}]", v) for i, v in enumerate(value)]
            for i, v in enumerate(value):
                yield f"{where}[{i}]", value, i, v  # type: ignore[misc]
        elif isinstance(value, dict):
            items = [(f"{where}.{k}", v) for k, v in value.items()]
            for k, v in value.items():
                yield f"{where}.{k}", value, k, v  # type: ignore[misc]
        elif isinstance(value, betterproto2.Message):
            items = [(where, value)]
        for item_path, item in items:
            if isinstance(item, betterproto2.Message):
                yield from field_slots(item, item_path, depth + 1)


def mutate_everywhere(message: betterproto2.Message, call: Callable[[], Any]) -> int:
    """Set every slot of ``message`` to every BAD value in turn (restoring it after), calling
    ``call`` each time. Returns the number of calls."""
    calls = 0
    for where, owner, key, original in list(field_slots(message)):
        for bad in BAD:
            if isinstance(owner, (list, dict)):
                owner[key] = bad
            else:
                object.__setattr__(owner, key, bad)
            try:
                outcome(call)
            except AssertionError:
                raise
            except Exception as exc:
                raise AssertionError(f"{where} = {bad!r}: {type(exc).__name__}: {exc}") from exc
            finally:
                if isinstance(owner, (list, dict)):
                    owner[key] = original
                else:
                    object.__setattr__(owner, key, original)
            calls += 1
    return calls


def args_everywhere(func: Callable[..., Any], *good: Any) -> None:
    """Call ``func`` with each positional argument replaced by each BAD value."""
    for i in range(len(good)):
        for bad in BAD:
            args = list(good)
            args[i] = bad
            try:
                outcome(lambda args=args: func(*args))
            except Exception as exc:
                raise AssertionError(
                    f"{func.__name__} argument {i} = {bad!r}: {type(exc).__name__}: {exc}"
                ) from exc


def priced_spec() -> Any:
    return make_spec()


# --- plain arguments -------------------------------------------------------------------------

ARG_CASES: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
    (structs.parse_json_object, ('{"a": 1}',)),
    (structs.check_json, ({"a": 1},)),
    (structs.to_struct, ({"a": 1},)),
    (structs.from_struct, (structs.to_struct({"a": 1}),)),
    (structs.dumps, ({"a": 1},)),
    (protojson.encode, (Usage(input_tokens=1),)),
    (protojson.dumps, (Usage(input_tokens=1),)),
    (protojson.decode, (Usage, {"inputTokens": 1})),
    (protojson.decode_or_raise, (Usage, {"inputTokens": 1})),
    (protojson.field_keys, (Usage,)),
    (protojson.json_type, ([],)),
    (protojson.json_name, ("cache_write_1h_tokens",)),
    (type_check.with_defaults, (Usage(),)),
    (type_check.check_message, (Usage(),)),
    (validate_model_spec, (make_spec(),)),
    (validate_capabilities, (Capabilities(protocol_version="1.0", models=[make_spec()]),)),
    (validate_request, (make_request(), make_spec())),
    (validate_request_shape, (make_request(),)),
    (validate_document, ({"id": "m"},)),
    (detect_kind, ({"id": "m"},)),
    (load_document, ("/nonexistent/file.json",)),
    (route, (make_request(), [ModelTarget(provider="p", spec=make_spec())])),
    (validate_pricing, (make_spec().pricing,)),
    (PricingTable, (make_spec().pricing,)),
    (cost, (make_spec().pricing, Usage(input_tokens=10, output_tokens=5), NOW)),
    (prompt_tokens, (Usage(input_tokens=1),)),
    (format_usd, (__import__("decimal").Decimal("1.5"),)),
    (parse_timestamp, ("2026-01-01",)),
    (accumulate, ([StreamEvent(text_delta=TextDelta(text="a"))],)),
    (errors_only, ([],)),
]


@pytest.mark.parametrize(("func", "good"), ARG_CASES, ids=[f.__qualname__ for f, _ in ARG_CASES])
def test_public_function_rejects_bad_arguments_with_typed_errors(
    func: Callable[..., Any], good: tuple[Any, ...]
) -> None:
    outcome(lambda: func(*good))  # the good call works
    args_everywhere(func, *good)


def test_methods_reject_bad_arguments_with_typed_errors() -> None:
    table = PricingTable(make_spec().pricing)
    args_everywhere(table.resolve, NOW, 10)
    args_everywhere(StreamOrderChecker().check, StreamEvent(text_delta=TextDelta(text="a")))
    args_everywhere(StreamAccumulator().feed, StreamEvent(text_delta=TextDelta(text="a")))
    args_everywhere(ValidationError, [Violation("p", "r", "m")])


# --- messages with bad fields ----------------------------------------------------------------


def test_request_validation_and_routing_survive_any_bad_field() -> None:
    for request in (
        make_request(),
        populate(StreamCompletionRequest, 0),
        populate(StreamCompletionRequest, 1),
    ):
        spec = make_spec()
        calls = mutate_everywhere(
            request,
            lambda request=request, spec=spec: (
                validate_request(request, spec),
                validate_request_shape(request),
                route(request, [ModelTarget(provider="p", spec=spec)]),
            ),
        )
        assert calls > 100


def test_spec_and_capabilities_validation_survive_any_bad_field() -> None:
    request = make_request()
    for spec in (make_spec(), populate(type(make_spec()), 0)):
        mutate_everywhere(
            spec,
            lambda spec=spec: (
                validate_model_spec(spec),
                validate_request(request, spec),
                validate_request_shape(request),
                route(request, [ModelTarget(provider="p", spec=spec)]),
                validate_capabilities(Capabilities(protocol_version="1.0", models=[spec])),
            ),
        )
    caps = populate(Capabilities, 0)
    mutate_everywhere(caps, lambda: validate_capabilities(caps))


def test_pricing_survives_any_bad_field() -> None:
    pricing = Pricing(
        currency="USD",
        tiers=[
            PricingTier(input_per_mtok=3, output_per_mtok=15, input_tokens_until=1000),
            PricingTier(
                input_per_mtok=6,
                output_per_mtok=30,
                cache_read_per_mtok=0.3,
                cache_write_per_mtok=3.75,
                input_tokens_from=1000,
                effective_from="2020-01-01",
            ),
            PricingTier(
                input_per_mtok=1,
                output_per_mtok=1,
                effective_until="2020-01-01",
                input_tokens_from=1000,
            ),
        ],
    )
    usage = populate(Usage, 0)
    usage.cache_write_1h_tokens = 0
    mutate_everywhere(
        pricing, lambda: (validate_pricing(pricing), cost(pricing, Usage(input_tokens=5), NOW))
    )
    mutate_everywhere(usage, lambda: (prompt_tokens(usage), cost(pricing, usage, NOW)))


def test_stream_accumulation_survives_any_bad_field() -> None:
    for variant in range(14):
        event = populate(StreamEvent, variant)

        def run(event: StreamEvent = event) -> Any:
            acc = StreamAccumulator()
            acc.feed(StreamEvent(thinking_delta=populate(StreamEvent, 2).thinking_delta))
            acc.feed(event)
            acc.feed(event)
            return acc.result().to_json()

        mutate_everywhere(event, run)
        mutate_everywhere(event, lambda event=event: protojson.encode(event))


def test_struct_conversion_survives_any_bad_field() -> None:
    struct = structs.to_struct({"a": [1, {"b": None, "c": "x"}], "d": 2.5, "e": True})
    mutate_everywhere(struct, lambda: structs.from_struct(struct))


# --- calls with wrongly typed arguments, and their typed errors ---------------------------------


def test_reported_calls_get_typed_errors_or_proto3_defaults() -> None:
    # A None rate is the proto3 default (0 USD per million tokens), as after a wire round trip.
    breakdown = cost(
        Pricing(currency="USD", tiers=[PricingTier(input_per_mtok=None, output_per_mtok=1)]),  # type: ignore[arg-type]
        Usage(input_tokens=412, output_tokens=28),
        NOW,
    )
    assert breakdown.total_usd() == "0.000028"
    assert breakdown.terms["input"] == 0
    with pytest.raises(ProtocolError) as info:
        prompt_tokens(None)  # type: ignore[arg-type]
    assert info.value.rule == "usage.type"  # type: ignore[attr-defined]
    assert prompt_tokens(Usage(input_tokens=None, cache_read_tokens=4)) == 4  # type: ignore[arg-type]
    with pytest.raises(ProtocolError):
        accumulate(None)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError) as order:
        accumulate([StreamEvent(usage=Usage(input_tokens="x"))])  # type: ignore[arg-type]
    assert order.value.rule == "stream.event.invalid"  # type: ignore[attr-defined]
    assert "usage.input_tokens" in str(order.value)
    with pytest.raises(ProtocolError):
        errors_only(None)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError):
        detect_kind(None)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError):
        load_document(None)  # type: ignore[arg-type]


def test_protojson_dumps_refuses_nan_inside_a_struct() -> None:
    block = ToolUseBlock(
        id="c", name="f", input=Struct(fields={"n": Value(number_value=float("nan"))})
    )
    with pytest.raises(ProtocolError) as info:
        protojson.dumps(block)
    assert info.value.rule == "json.not_finite"  # type: ignore[attr-defined]


def test_messages_nested_beyond_protobufs_recursion_limit_are_a_typed_error() -> None:
    def nested(levels: int) -> ContentBlock:
        block = ContentBlock(text=TextBlock(text="x"))
        for _ in range(levels):
            block = ContentBlock(tool_result=ToolResultBlock(tool_use_id="c", content=[block]))
        return block

    request = make_request(messages=[Message(id="1", role=Role.USER, content=[nested(2000)])])
    # Reachable from the wire, so request validation reports it rather than raising.
    for violations in (validate_request(request, make_spec()), validate_request_shape(request)):
        assert [v.rule for v in violations] == ["request.too_deep"]
        assert violations[0].path.startswith("messages[0].content[0].tool_result.content[0]")
    with pytest.raises(ProtocolError) as info:
        type_check.check_message(request)
    assert info.value.rule == "value.too_deep"  # type: ignore[attr-defined]
    shallow = make_request(messages=[Message(id="1", role=Role.USER, content=[nested(20)])])
    assert type_check.check_message(shallow)[1] == []


def test_map_entry_without_value_reads_as_the_value_default() -> None:
    meta = StreamMetadata(attrs={"k": None})  # type: ignore[dict-item]
    checked, violations = type_check.check_message(meta)
    assert (checked.attrs, violations) == ({"k": ""}, [])
    assert meta.attrs == {"k": None}  # the input is not modified
    assert protojson.encode(meta) == {"attrs": {"k": ""}}
