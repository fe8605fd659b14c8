"""Helpers for the agent-loop tests: case requests decoded from proto3 JSON, a vendor provider
served over gRPC in front of a stub upstream, SSE bodies from case lines."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from protocol_py.client.client import ModelClient
from protocol_py.codec import protojson
from protocol_py.providers.anthropic.provider import AnthropicProvider
from protocol_py.providers.http.base import HTTPProvider
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py.server import ModelServer
from protocol_py_gen.model.v1 import ModelSpec, StreamCompletionRequest
from tests.support.adapters import lines_to_bytes, load_case
from tests.support.stub_upstream import Reply, StubUpstream

__all__ = ["Served", "case", "decode", "lines_to_bytes", "served", "spec_of", "sse_reply"]

SSE_HEADERS = {"content-type": "text/event-stream"}


def case(case_id: str) -> dict[str, Any]:
    """testdata/cases/<id>.json."""
    return load_case(case_id)


def decode(data: dict[str, Any]) -> StreamCompletionRequest:
    """A case's request (proto3 JSON), decoded strictly."""
    request, violations = protojson.decode(StreamCompletionRequest, data)
    assert violations == [] and request is not None
    return request


def spec_of(data: dict[str, Any]) -> ModelSpec:
    """A case's model_spec (proto3 JSON)."""
    spec, violations = protojson.decode(ModelSpec, data)
    assert violations == [] and spec is not None
    return spec


def sse_reply(lines: Sequence[str], headers: dict[str, str] | None = None) -> Reply:
    """A 200 event-stream reply with a case's SSE lines."""
    return Reply(headers={**SSE_HEADERS, **(headers or {})}, chunks=[lines_to_bytes(list(lines))])


@dataclass
class Served:
    client: ModelClient
    stub: StubUpstream
    provider: HTTPProvider


@contextlib.asynccontextmanager
async def served(
    vendor: str, *replies: Reply, specs: Sequence[ModelSpec] = ()
) -> AsyncIterator[Served]:
    """The ``vendor`` provider ("openai" or "anthropic") in front of a stub upstream answering
    ``replies`` in order, served by a ModelServer on 127.0.0.1 with a connected client. Extra
    ``specs`` are served beside the catalog's."""
    async with StubUpstream() as stub:
        stub.queue(*replies)
        provider: HTTPProvider
        if vendor == "anthropic":
            provider = AnthropicProvider(api_key="sk-ant-test-key", base_url=stub.url)
        else:
            provider = OpenAIProvider(api_key="sk-test-key", base_url=stub.url)
        for spec in specs:
            provider._models[spec.id] = spec
        server = ModelServer(provider)
        port = await server.start("127.0.0.1", 0)
        client = ModelClient.connect(f"127.0.0.1:{port}")
        try:
            yield Served(client, stub, provider)
        finally:
            client.close()
            await server.shutdown(grace_period=0)
            await provider.aclose()
