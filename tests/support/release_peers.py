"""A kernel or plugin of an earlier release, as google's grpcio with upb classes built from that
release's image (``proto-baseline/protocol-X.Y.binpb``): what the minor-version compatibility
tests run against this release."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from typing import Any, Protocol

import grpc
from google.protobuf import unknown_fields

SERVICE = "/model.v1.ModelService/"

Classes = Callable[[str], Any]
"""A lookup ``name -> message class`` of one release (``support.image_classes``)."""


def unknown(message: Any) -> dict[int, list[bytes]]:
    """The unknown fields of a upb message: field number -> the raw data of each occurrence."""
    found: dict[int, list[bytes]] = {}
    for field in unknown_fields.UnknownFieldSet(message):
        found.setdefault(field.field_number, []).append(field.data)
    return found


def stream_upb(classes: Classes, address: str, request: Any) -> list[Any]:
    """Every StreamEvent of one StreamCompletion, decoded with ``classes`` (30 s deadline)."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_stream(
            SERVICE + "StreamCompletion",
            request_serializer=type(request).SerializeToString,
            response_deserializer=classes("model.v1.StreamEvent").FromString,
        )
        return list(call(request, timeout=30))


def upb_request(classes: Classes, prompt: str, declared: Sequence[Any] = (), **fields: Any) -> Any:
    """A one-message StreamCompletionRequest for ``reference-large`` built with ``classes``."""
    block = classes("content.v1.ContentBlock")(text=classes("content.v1.TextBlock")(text=prompt))
    return classes("model.v1.StreamCompletionRequest")(
        model_id="reference-large",
        messages=[
            classes("content.v1.Message")(role=1, id="01J0000000000000000000000A", content=[block])
        ],
        tools=list(declared),
        call_context=classes("common.v1.CallContext")(session_id="s", turn_id="t"),
        **fields,
    )


def event_cases(events: list[Any]) -> list[str | None]:
    """The set member of each event's ``event`` oneof (None for one the classes do not know)."""
    return [e.WhichOneof("event") for e in events]


class OldPlugin(Protocol):
    """The two methods an earlier release's test plugin serves."""

    def stream(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]: ...

    def capabilities(self, request: Any, context: grpc.ServicerContext) -> Any: ...


@contextmanager
def serve_old_plugin(classes: Classes, plugin: OldPlugin) -> Iterator[str]:
    """Serve ``plugin``'s StreamCompletion and GetCapabilities with grpcio on 127.0.0.1,
    decoding requests with ``classes``; yields the address, stops the server afterwards."""
    handlers = {
        "StreamCompletion": grpc.unary_stream_rpc_method_handler(
            plugin.stream,
            request_deserializer=classes("model.v1.StreamCompletionRequest").FromString,
            response_serializer=lambda m: m.SerializeToString(),
        ),
        "GetCapabilities": grpc.unary_unary_rpc_method_handler(
            plugin.capabilities,
            request_deserializer=classes("model.v1.GetCapabilitiesRequest").FromString,
            response_serializer=lambda m: m.SerializeToString(),
        ),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("model.v1.ModelService", handlers),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)
