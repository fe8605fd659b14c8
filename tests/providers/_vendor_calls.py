"""Helpers of the vendor-provider tests: one provider of each vendor (OpenAI, DeepSeek, Anthropic)
with a fixed API key, pointed at the stub upstream, a one-message request, and reply builders."""

from __future__ import annotations

import json
from typing import Any

import betterproto2

from protocol_py.providers.anthropic.provider import AnthropicProvider
from protocol_py.providers.http.base import HTTPProvider
from protocol_py.providers.http.errors import (
    RetryPolicy,
)
from protocol_py.providers.openai.provider import DeepSeekProvider, OpenAIProvider
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
)
from protocol_py_gen.model.v1 import (
    StreamCompletionRequest,
    StreamEvent,
)

from ..support.stub_upstream import Reply

KEY = "TOPSECRET-QWERTY-0123456789"  # not sk-shaped, like vLLM / Ollama / gateway keys


MODEL = {"openai": "gpt-6-sol", "deepseek": "deepseek-flash", "anthropic": "claude-sonnet-5-5"}


PROVIDERS: dict[str, type[HTTPProvider]] = {
    "openai": OpenAIProvider,
    "deepseek": DeepSeekProvider,
    "anthropic": AnthropicProvider,
}


SSE = {"content-type": "text/event-stream"}


def value(event: StreamEvent) -> Any:
    return betterproto2.which_one_of(event, "event")[1]


def user(text: str, mid: str = "u1") -> Message:
    return Message(role=Role.USER, id=mid, content=[ContentBlock(text=TextBlock(text=text))])


def request(model: str) -> StreamCompletionRequest:
    return StreamCompletionRequest(model_id=model, messages=[user("hello")])


def make(vendor: str, url: str) -> HTTPProvider:
    return PROVIDERS[vendor](api_key=KEY, base_url=url, retry=RetryPolicy(max_attempts=1))


async def collect(provider: HTTPProvider, model: str) -> list[StreamEvent]:
    return [e async for e in provider.stream(request(model), CallContext())]


def json_reply(status: int, body: Any, headers: dict[str, str] | None = None) -> Reply:
    data = json.dumps(body).encode()
    return Reply(
        status=status,
        headers={"content-type": "application/json", "content-length": str(len(data))}
        | (headers or {}),
        chunks=[data],
    )


def sse_body(*events: str) -> bytes:
    return "".join(e + "\n\n" for e in events).encode()
