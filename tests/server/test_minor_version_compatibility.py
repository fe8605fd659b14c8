"""Compatibility between minor versions (README "Compatibility between minor versions"): a
kernel built against protocol 1.0 keeps working with this 1.1 plugin, and a 1.1 kernel keeps
working with a 1.0 plugin.

The 1.0 side is google's upb classes built at run time from the released image
``proto-baseline/protocol-1.0.binpb`` (exactly what a 1.0 kernel or plugin was compiled from):
1.1's new fields arrive there as unknown fields (kept and re-sent byte for byte), its new enum
value as an unknown enum number, and nothing fails.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from protocol_py.client.client import ModelClient
from protocol_py.providers.reference import reference_models
from protocol_py.rules.accumulate import accumulate
from protocol_py.rules.capabilities import validate_capabilities
from protocol_py.rules.replay import is_paused
from protocol_py.rules.vendor_data import OPENAI_EXTRA_CONTENT
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ToolUseBlock,
    VendorData,
)
from protocol_py_gen.model.v1 import Capabilities, StopReason

from ..support.image_classes import classes_from_image
from ..support.release_peers import (
    event_cases,
    serve_old_plugin,
    stream_upb,
    unknown,
    upb_request,
)
from ..support.servers import Subprocess, make_request

REPO_ROOT = Path(__file__).resolve().parents[2]
BASELINE_1_0 = REPO_ROOT / "proto-baseline" / "protocol-1.0.binpb"
STOP_REASON_PAUSE_TURN = 8


@pytest.fixture(scope="module")
def v10() -> Callable[[str], Any]:
    """The 1.0 release's message classes."""
    return classes_from_image(BASELINE_1_0)


def upb_tool_request(v10: Callable[[str], Any], prompt: str) -> Any:
    """A request declaring the one ``get_weather`` tool, with the 1.0 classes."""
    schema = v10("google.protobuf.Struct")()
    schema.update({"type": "object", "properties": {"city": {"type": "string"}}})
    tool = v10("model.v1.ToolDeclaration")(name="get_weather", input_schema=schema)
    return upb_request(v10, prompt, [tool])


# -- a 1.0 kernel against this 1.1 plugin ----------------------------------------------------


def test_1_0_kernel_receives_vendor_data_as_unknown_fields_kept_byte_for_byte(
    v10: Callable[[str], Any], cli_server: Subprocess
) -> None:
    events = stream_upb(v10, cli_server.address, upb_tool_request(v10, "signed tool: weather"))
    assert event_cases(events)[-1] == "stop"
    (start,) = [e.tool_call_start for e in events if e.WhichOneof("event") == "tool_call_start"]
    assert start.id.startswith("toolu_refsig_") and start.name == "get_weather"
    (entry,) = unknown(start)[3]  # ToolCallStart.vendor_data (field 3) is unknown to 1.0
    assert b"reference.tool_call.signature" in entry and b"refcall:" in entry
    assert events[-1].stop.reason == 2  # STOP_REASON_TOOL_USE, known to 1.0
    # A 1.0 kernel relaying the event (a proxy, a log) re-sends the unknown field unchanged.
    relayed = v10("model.v1.StreamEvent").FromString(
        next(e for e in events if e.WhichOneof("event") == "tool_call_start").SerializeToString()
    )
    assert unknown(relayed.tool_call_start) == unknown(start)


def test_1_0_kernel_sees_pause_turn_as_an_unknown_stop_reason_number(
    v10: Callable[[str], Any], cli_server: Subprocess
) -> None:
    events = stream_upb(v10, cli_server.address, upb_request(v10, "Please pause turn now"))
    stop = events[-1].stop
    assert event_cases(events)[-1] == "stop"
    enum_1_0 = v10("model.v1.Stop").DESCRIPTOR.fields_by_name["reason"].enum_type
    assert enum_1_0.values_by_number.get(STOP_REASON_PAUSE_TURN) is None  # not in 1.0
    assert stop.reason == STOP_REASON_PAUSE_TURN  # proto3 open enum: the number is kept
    # What a 1.0 kernel acts on (docs/decisions.md#d11): the raw reason and that the vendor
    # affirmed it.
    assert (stop.vendor_reason, stop.model_affirmed) == ("pause_turn", True)


def test_1_0_shaped_requests_are_served_by_the_1_1_plugin(
    v10: Callable[[str], Any], cli_server: Subprocess
) -> None:
    events = stream_upb(v10, cli_server.address, upb_request(v10, "Hello there"))
    assert event_cases(events)[0] == "stream_start" and events[-1].stop.reason == 1  # END_TURN
    text = "".join(e.text_delta.text for e in events if e.WhichOneof("event") == "text_delta")
    assert "You wrote: Hello there" in text
    # A 1.0 tool turn (no vendor data anywhere) round-trips: call, then its result.
    first = stream_upb(v10, cli_server.address, upb_tool_request(v10, "use tool please"))
    (start,) = [e.tool_call_start for e in first if e.WhichOneof("event") == "tool_call_start"]
    assert unknown(start) == {}  # an unsigned call carries no vendor data
    request = upb_tool_request(v10, "use tool please")
    use = v10("content.v1.ToolUseBlock")(id=start.id, name=start.name)
    request.messages.add(id="01J0000000000000000000000B", role=2).content.add(tool_use=use)
    result = v10("content.v1.ToolResultBlock")(tool_use_id=start.id)
    result.content.add(text=v10("content.v1.TextBlock")(text="sunny"))
    request.messages.add(id="01J0000000000000000000000C", role=1).content.add(tool_result=result)
    second = stream_upb(v10, cli_server.address, request)
    text = "".join(e.text_delta.text for e in second if e.WhichOneof("event") == "text_delta")
    assert "The tool returned: sunny" in text and second[-1].stop.reason == 1


# -- a 1.1 kernel against a 1.0 plugin ---------------------------------------------------------


class Plugin10:
    """A minimal 1.0 plugin: grpcio with the 1.0 classes; answers StreamCompletion with a fixed
    1.0 stream and records the unknown fields of every request's tool_use blocks."""

    def __init__(self, v10: Callable[[str], Any]) -> None:
        self.v10 = v10
        self.unknown_seen: list[dict[int, list[bytes]]] = []
        self.lock = threading.Lock()

    def stream(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        v10 = self.v10
        for message in request.messages:
            for block in message.content:
                if block.WhichOneof("block") == "tool_use":
                    with self.lock:
                        self.unknown_seen.append(unknown(block.tool_use))
        event = v10("model.v1.StreamEvent")
        yield event(stream_start=v10("model.v1.StreamStart")(provider_request_id="req_10"))
        yield event(text_delta=v10("model.v1.TextDelta")(text="from 1.0"))
        yield event(usage=v10("model.v1.Usage")(input_tokens=3, output_tokens=2))
        yield event(stop=v10("model.v1.Stop")(reason=1, model_affirmed=True))

    def capabilities(self, request: Any, context: grpc.ServicerContext) -> Any:
        v10 = self.v10
        spec = v10("model.v1.ModelSpec").FromString(bytes(reference_models()[2]))
        caps = v10("model.v1.Capabilities")(protocol_version="1.0", models=[spec])
        return v10("model.v1.GetCapabilitiesResponse")(capabilities=caps)


@pytest.fixture
def plugin_1_0(v10: Callable[[str], Any]) -> Iterator[tuple[Plugin10, str]]:
    plugin = Plugin10(v10)
    with serve_old_plugin(v10, plugin) as address:
        yield plugin, address


async def test_1_1_kernel_works_with_a_1_0_plugin(plugin_1_0: tuple[Plugin10, str]) -> None:
    plugin, address = plugin_1_0
    client = ModelClient.connect(address)
    try:
        caps = await client.get_capabilities()  # validated by the 1.1 client
        assert caps.protocol_version == "1.0"
        assert [m.id for m in caps.models] == ["reference-small"]
        # An older minor is accepted by 1.1's validation (no violation for the version).
        assert [
            v
            for v in validate_capabilities(Capabilities(protocol_version="1.0"))
            if v.path == "protocol_version"
        ] == []
        signed = ToolUseBlock(
            id="call_1",
            name="get_weather",
            vendor_data=[VendorData(location=OPENAI_EXTRA_CONTENT, value=b'{"google":{}}')],
        )
        request = make_request(
            messages=[
                Message(
                    role=Role.USER,
                    id="01J0000000000000000000000A",
                    content=[ContentBlock(text=TextBlock(text="hi"))],
                ),
                Message(
                    role=Role.ASSISTANT,
                    id="01J0000000000000000000000B",
                    content=[ContentBlock(tool_use=signed)],
                ),
            ]
        )
        events = [e async for e in client.stream(request)]
    finally:
        client.close()
    folded = accumulate(events)
    assert folded.stop is not None and folded.stop.reason == StopReason.END_TURN
    assert not is_paused(folded.stop)
    assert [b.text.text for b in folded.message.content if b.text is not None] == ["from 1.0"]
    # The 1.0 plugin decoded the 1.1 request; the vendor data arrived as an unknown field 4.
    assert [set(u) for u in plugin.unknown_seen] == [{4}]
    assert OPENAI_EXTRA_CONTENT.encode() in plugin.unknown_seen[0][4][0]


# -- a 1.1 kernel built with google's classes (the names as the protos write them) -------------


def test_1_1_grpcio_kernel_reads_vendor_data_and_pause_turn_by_their_proto_names(
    cli_server: Subprocess,
) -> None:
    v11 = classes_from_image(REPO_ROOT / "gen" / "descriptor" / "protocol.binpb")
    events = stream_upb(v11, cli_server.address, upb_tool_request(v11, "signed tool: weather"))
    (start,) = [e.tool_call_start for e in events if e.WhichOneof("event") == "tool_call_start"]
    (entry,) = start.vendor_data
    assert entry.location == "reference.tool_call.signature"
    assert entry.value.startswith(b"refcall:")
    assert unknown(start) == {}
    paused = stream_upb(v11, cli_server.address, upb_request(v11, "Please pause turn now"))
    reason = v11("model.v1.Stop").DESCRIPTOR.fields_by_name["reason"].enum_type
    assert reason.values_by_name["STOP_REASON_PAUSE_TURN"].number == STOP_REASON_PAUSE_TURN
    assert paused[-1].stop.reason == STOP_REASON_PAUSE_TURN
