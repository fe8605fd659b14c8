"""A test provider loaded by path (``serve --provider tests/server/protocol_1_2_provider.py:
VendorContentProvider``): the reference provider, whose ``reference-large`` model also declares
protocol 1.2 fields, and which answers a prompt containing ``vendor content`` with a stream using
every protocol 1.2 stream form (:data:`VENDOR_CONTENT_STREAM`). With ``$RECORD_FILE`` set it
appends one JSON line per StreamCompletionRequest: its ``kernel_protocol_version`` and the
block kinds of each message."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping

import betterproto2

from protocol_py.provider import Provider
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import VendorBlock, VendorData
from protocol_py_gen.model.v1 import (
    Capabilities,
    RequestCount,
    RequestRate,
    Stop,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    StreamStart,
    TextDelta,
    Usage,
)

SERVER_TOOL_USE = (
    b'{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"q"}}'
)
TEXT_SIGNATURE = b"CiQB-text-part-signature"
FINAL_SIGNATURE = b"Ci8B-final-empty-part"


def vendor_content_stream() -> list[StreamEvent]:
    """Seven events: stream_start, a signed text delta, a vendor block, a text delta opening a
    new block, an empty text delta carrying only a signature, usage with a request count and
    cache storage, stop."""
    return [
        StreamEvent(stream_start=StreamStart(provider_request_id="req_12")),
        StreamEvent(
            text_delta=TextDelta(
                text="Searching. ",
                vendor_data=[
                    VendorData(location="gemini.part.thought_signature", value=TEXT_SIGNATURE)
                ],
            )
        ),
        StreamEvent(
            vendor_block=VendorBlock(
                vendor="anthropic", block_type="server_tool_use", data=SERVER_TOOL_USE
            )
        ),
        StreamEvent(text_delta=TextDelta(text="Found it.", new_block=True)),
        StreamEvent(
            text_delta=TextDelta(
                text="",
                new_block=True,
                vendor_data=[
                    VendorData(location="gemini.part.thought_signature", value=FINAL_SIGNATURE)
                ],
            )
        ),
        StreamEvent(
            usage=Usage(
                input_tokens=10,
                output_tokens=5,
                request_counts=[RequestCount(name="web_search", count=1)],
                cache_storage_token_seconds=3600,
            )
        ),
        StreamEvent(stop=Stop(reason=StopReason.END_TURN, model_affirmed=True)),
    ]


def _kinds(request: StreamCompletionRequest) -> list[list[str]]:
    return [
        [betterproto2.which_one_of(block, "block")[0] for block in message.content]
        for message in request.messages
    ]


class VendorContentProvider(ReferenceProvider):
    name = "vendor-content"

    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        for spec in caps.models:
            if spec.id != "reference-large":
                continue
            spec.supports_stop_sequences = True
            spec.max_stop_sequences = 4
            assert spec.pricing is not None
            for tier in spec.pricing.tiers:
                tier.request_rates = [RequestRate(name="web_search", price_per_request=0.01)]
                if spec.caching is not None and spec.caching.supported:
                    tier.cache_storage_per_mtok_hour = 4.5
        return caps

    async def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        record = os.environ.get("RECORD_FILE")
        if record:
            with open(record, "a", encoding="utf-8") as handle:  # noqa: ASYNC230 (a test log)
                line = {
                    "kernel_protocol_version": request.kernel_protocol_version,
                    "kinds": _kinds(request),
                }
                handle.write(json.dumps(line) + "\n")
        last = request.messages[-1]
        prompt = " ".join(b.text.text for b in last.content if b.text is not None)
        if "vendor content" in prompt:
            for event in vendor_content_stream():
                yield event
            return
        async for event in super().stream(request, context):
            yield event

    @classmethod
    def from_cli(cls, *, base_url: str | None, discover: bool, env: Mapping[str, str]) -> Provider:
        return cls()
