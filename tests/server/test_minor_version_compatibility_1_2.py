"""Compatibility between protocol 1.1 and 1.2 through grpcio (docs/decisions.md#d30): a 1.1
kernel gets a stream its rules accept from this 1.2 plugin, and this 1.2 kernel keeps working
with a 1.1 plugin.

The 1.1 side is google's upb classes built at run time from the released image
``proto-baseline/protocol-1.1.binpb``: 1.2's new fields arrive there as unknown fields (kept
byte for byte), and 1.2's new oneof members never reach it.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import reference_models
from protocol_py.rules.accumulate import accumulate
from protocol_py.version import PROTOCOL_VERSION
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    VendorBlock,
    VendorData,
)
from protocol_py_gen.model.v1 import StopReason

from ..support.image_classes import classes_from_image
from ..support.release_peers import (
    SERVICE,
    event_cases,
    serve_old_plugin,
    stream_upb,
    unknown,
    upb_request,
)
from ..support.servers import CONSOLE_SCRIPT, Subprocess, make_request, spawn_server
from .protocol_1_2_provider import (
    FINAL_SIGNATURE,
    SERVER_TOOL_USE,
    TEXT_SIGNATURE,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
BASELINE_1_1 = REPO_ROOT / "proto-baseline" / "protocol-1.1.binpb"
PROVIDER = f"{Path(__file__).with_name('protocol_1_2_provider.py')}:VendorContentProvider"
assert CONSOLE_SCRIPT.exists()


@pytest.fixture(scope="module")
def v11() -> Callable[[str], Any]:
    """The 1.1 release's message classes."""
    return classes_from_image(BASELINE_1_1)


@pytest.fixture(scope="module")
def v12() -> Callable[[str], Any]:
    """This protocol's message classes, as google's classes (the names the protos write)."""
    return classes_from_image(REPO_ROOT / "gen" / "descriptor" / "protocol.binpb")


@pytest.fixture
def record_file(tmp_path: Path) -> Path:
    return tmp_path / "requests.jsonl"


@pytest.fixture
def plugin_1_2(record_file: Path) -> Iterator[Subprocess]:
    """The console script serving the 1.2 test provider; stopped (SIGTERM) afterwards."""
    os.environ["RECORD_FILE"] = str(record_file)
    try:
        sub = spawn_server("--provider", PROVIDER)
    finally:
        del os.environ["RECORD_FILE"]
    try:
        yield sub
    finally:
        stop(sub)


def stop(sub: Subprocess) -> None:
    if sub.proc.poll() is None:
        sub.proc.terminate()
        try:
            sub.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            sub.proc.kill()
            sub.proc.wait()


# -- a 1.1 kernel against this 1.2 plugin ------------------------------------------------------


def test_1_1_kernel_gets_only_events_1_1_knows_and_the_same_text(
    v11: Callable[[str], Any], plugin_1_2: Subprocess, record_file: Path
) -> None:
    events = stream_upb(v11, plugin_1_2.address, upb_request(v11, "show vendor content"))
    # the vendor block and the empty signature-only delta were dropped for the 1.1 kernel
    assert event_cases(events) == ["stream_start", "text_delta", "text_delta", "usage", "stop"]
    deltas = [e.text_delta for e in events if e.WhichOneof("event") == "text_delta"]
    assert [d.text for d in deltas] == ["Searching. ", "Found it."]  # 1.1: none empty
    assert "".join(d.text for d in deltas) == "Searching. Found it."
    # 1.2 fields inside known members arrive as unknown fields, byte for byte
    (entry,) = unknown(deltas[0])[2]  # TextDelta.vendor_data
    assert b"gemini.part.thought_signature" in entry and TEXT_SIGNATURE in entry
    assert unknown(deltas[1]) == {3: [1]}  # TextDelta.new_block = true (a varint)
    usage = events[3].usage
    assert (usage.input_tokens, usage.output_tokens) == (10, 5)
    assert sorted(unknown(usage)) == [12, 13]  # request_counts, cache_storage_token_seconds
    assert b"web_search" in unknown(usage)[12][0]
    assert events[-1].stop.reason == 1 and events[-1].stop.model_affirmed
    (line,) = [json.loads(x) for x in record_file.read_text().splitlines()]
    assert line == {"kernel_protocol_version": None, "kinds": [["text"]]}
    stop(plugin_1_2)
    assert (
        "dropped 1 vendor_block, 1 text_delta event(s) that a kernel below protocol 1.2 cannot "
        "read (vendor-only content; the request's kernel_protocol_version is absent)"
    ) in plugin_1_2.stderr_text()


def test_1_1_kernel_reads_1_2_capabilities_with_the_new_fields_as_unknown(
    v11: Callable[[str], Any], plugin_1_2: Subprocess
) -> None:
    with grpc.insecure_channel(plugin_1_2.address) as channel:
        call = channel.unary_unary(
            SERVICE + "GetCapabilities",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=v11("model.v1.GetCapabilitiesResponse").FromString,
        )
        caps = call(v11("model.v1.GetCapabilitiesRequest")(), timeout=30).capabilities
    assert caps.protocol_version == PROTOCOL_VERSION
    (large,) = [m for m in caps.models if m.id == "reference-large"]
    assert sorted(unknown(large)) == [13, 14]  # supports_stop_sequences, max_stop_sequences
    tier = large.pricing.tiers[0]
    assert 13 in unknown(tier)  # request_rates
    assert tier.input_per_mtok > 0  # the 1.1 fields read as before


def test_1_1_kernel_tool_turns_are_served_unchanged(
    v11: Callable[[str], Any], plugin_1_2: Subprocess
) -> None:
    events = stream_upb(v11, plugin_1_2.address, upb_request(v11, "Hello there"))
    assert event_cases(events)[0] == "stream_start" and events[-1].stop.reason == 1
    assert all(case is not None for case in event_cases(events))
    text = "".join(e.text_delta.text for e in events if e.WhichOneof("event") == "text_delta")
    assert "You wrote: Hello there" in text


# -- a 1.2 kernel (google's classes) against this plugin --------------------------------------


def test_1_2_kernel_gets_every_1_2_event(
    v12: Callable[[str], Any], plugin_1_2: Subprocess, record_file: Path
) -> None:
    request = upb_request(v12, "show vendor content", kernel_protocol_version=PROTOCOL_VERSION)
    events = stream_upb(v12, plugin_1_2.address, request)
    assert event_cases(events) == [
        "stream_start",
        "text_delta",
        "vendor_block",
        "text_delta",
        "text_delta",
        "usage",
        "stop",
    ]
    block = events[2].vendor_block
    assert (block.vendor, block.block_type, block.data) == (
        "anthropic",
        "server_tool_use",
        SERVER_TOOL_USE,
    )
    last = events[4].text_delta
    assert (last.text, last.new_block) == ("", True)
    assert [(v.location, v.value) for v in last.vendor_data] == [
        ("gemini.part.thought_signature", FINAL_SIGNATURE)
    ]
    counts = events[5].usage.request_counts
    assert [(c.name, c.count) for c in counts] == [("web_search", 1)]
    assert events[5].usage.cache_storage_token_seconds == 3600
    (line,) = [json.loads(x) for x in record_file.read_text().splitlines()]
    assert line["kernel_protocol_version"] == PROTOCOL_VERSION


async def test_1_2_client_folds_the_vendor_content_into_blocks(plugin_1_2: Subprocess) -> None:
    async with ModelClient.connect(plugin_1_2.address) as client:
        events = [e async for e in client.stream(make_request("show vendor content"))]
    folded = accumulate(events)
    content = folded.message.content
    assert content[0].text == TextBlock(
        text="Searching. ",
        vendor_data=[VendorData(location="gemini.part.thought_signature", value=TEXT_SIGNATURE)],
    )
    assert content[1].vendor_block == VendorBlock(
        vendor="anthropic", block_type="server_tool_use", data=SERVER_TOOL_USE
    )
    assert content[2].text == TextBlock(text="Found it.")
    assert content[3].text == TextBlock(
        text="",
        vendor_data=[VendorData(location="gemini.part.thought_signature", value=FINAL_SIGNATURE)],
    )
    assert len(content) == 4
    assert folded.stop is not None and folded.stop.reason == StopReason.END_TURN


# -- this 1.2 kernel against a 1.1 plugin ------------------------------------------------------


class Plugin11:
    """A minimal 1.1 plugin: grpcio with the 1.1 classes; records, for every request, the case
    of each block (None for a member 1.1 does not know) and the request's unknown fields."""

    def __init__(self, v11: Callable[[str], Any]) -> None:
        self.v11 = v11
        self.seen: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def stream(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        v11 = self.v11
        with self.lock:
            self.seen.append(
                {
                    "cases": [[b.WhichOneof("block") for b in m.content] for m in request.messages],
                    "unknown": unknown(request),
                    "text_unknown": [
                        unknown(b.text)
                        for m in request.messages
                        for b in m.content
                        if b.WhichOneof("block") == "text"
                    ],
                }
            )
        event = v11("model.v1.StreamEvent")
        yield event(text_delta=v11("model.v1.TextDelta")(text="from 1.1"))
        yield event(usage=v11("model.v1.Usage")(input_tokens=3, output_tokens=2))
        yield event(stop=v11("model.v1.Stop")(reason=1, model_affirmed=True))

    def capabilities(self, request: Any, context: grpc.ServicerContext) -> Any:
        v11 = self.v11
        spec = v11("model.v1.ModelSpec").FromString(bytes(reference_models()[2]))
        caps = v11("model.v1.Capabilities")(protocol_version="1.1", models=[spec])
        return v11("model.v1.GetCapabilitiesResponse")(capabilities=caps)


@pytest.fixture
def plugin_1_1(v11: Callable[[str], Any]) -> Iterator[tuple[Plugin11, str]]:
    plugin = Plugin11(v11)
    with serve_old_plugin(v11, plugin) as address:
        yield plugin, address


def history_with_vendor_content() -> list[Message]:
    signed = VendorData(location="gemini.part.thought_signature", value=TEXT_SIGNATURE)
    return [
        Message(
            role=Role.USER,
            id="01J0000000000000000000000A",
            content=[ContentBlock(text=TextBlock(text="search"))],
        ),
        Message(
            role=Role.ASSISTANT,
            id="01J0000000000000000000000B",
            content=[
                ContentBlock(text=TextBlock(text="Searching.", vendor_data=[signed])),
                ContentBlock(
                    vendor_block=VendorBlock(
                        vendor="anthropic", block_type="server_tool_use", data=SERVER_TOOL_USE
                    )
                ),
            ],
        ),
        Message(
            role=Role.USER,
            id="01J0000000000000000000000C",
            content=[ContentBlock(text=TextBlock(text="go on"))],
        ),
    ]


async def test_1_2_kernel_works_with_a_1_1_plugin(plugin_1_1: tuple[Plugin11, str]) -> None:
    plugin, address = plugin_1_1
    async with ModelClient.connect(address) as client:
        caps = await client.get_capabilities()  # validated by the 1.2 client
        assert caps.protocol_version == "1.1"
        request = make_request(messages=history_with_vendor_content())
        events = [e async for e in client.stream(request)]
    folded = accumulate(events)
    assert folded.stop is not None and folded.stop.reason == StopReason.END_TURN
    assert [b.text.text for b in folded.message.content if b.text is not None] == ["from 1.1"]
    (seen,) = plugin.seen
    # the client removed the vendor block the 1.1 plugin could not decode
    assert seen["cases"] == [["text"], ["text"], ["text"]]
    # kernel_protocol_version (9) and TextBlock.vendor_data (2) are unknown fields to 1.1
    assert seen["unknown"] == {9: [PROTOCOL_VERSION.encode()]}
    assert [sorted(u) for u in seen["text_unknown"]] == [[], [2], []]
    assert request.kernel_protocol_version is None  # the caller's request is not modified
    assert request.messages[1].content[1].vendor_block is not None


async def test_a_vendor_block_sent_without_the_plugin_version_is_what_1_1_cannot_decode(
    plugin_1_1: tuple[Plugin11, str],
) -> None:
    plugin, address = plugin_1_1
    async with ModelClient.connect(address) as client:  # Capabilities never fetched
        [e async for e in client.stream(make_request(messages=history_with_vendor_content()))]
    (seen,) = plugin.seen
    # What request_for_plugin prevents: a block with no member a 1.1 plugin knows.
    assert seen["cases"] == [["text"], ["text", None], ["text"]]
