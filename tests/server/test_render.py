"""Render: invalid payload values and unknown formats are INVALID_ARGUMENT
naming the field; the reference provider answers in the requested format (plain text or
Markdown)."""

from __future__ import annotations

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from protocol_py.client.client import ModelClient
from protocol_py.providers.reference import MAX_RENDER_CHARS, ReferenceProvider
from protocol_py_gen.model.v1 import RenderFormat, RenderRequest, RenderResponse

from ..support.servers import Running
from .test_malformed import raw_unary


def repeat(payload: bytes, fmt: RenderFormat = RenderFormat.UNSPECIFIED) -> RenderRequest:
    return RenderRequest(payload_type="reference.repeat", payload=payload, format=fmt)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (b'{"text": "ab", "times": -1}', "payload.times"),
        (b'{"text": "ab", "times": 1.5}', "payload.times"),
        (b'{"text": "ab", "times": true}', "payload.times"),
        (b'{"text": "ab", "times": "3"}', "payload.times"),
        (b'{"text": 5, "times": 3}', "payload.text"),
        (b'{"times": 3}', "payload.text"),
        (b'{"text": "ab"}', "payload.times"),
        (b"[1, 2]", "payload"),
        (b"not json", "payload"),
        (b'{"text": "ab", "times": 100000000}', "payload.times"),
    ],
)
async def test_render_rejects_invalid_repeat_payloads_naming_the_field(
    payload: bytes, field: str
) -> None:
    with pytest.raises(ValueError) as info:
        await ReferenceProvider().render(repeat(payload))
    assert str(info.value).startswith(f"{field}:"), str(info.value)


async def test_render_repeat_limit_is_exact() -> None:
    at_limit = await ReferenceProvider().render(
        repeat(b'{"text": "a", "times": %d}' % MAX_RENDER_CHARS)
    )
    assert len(at_limit.text) == MAX_RENDER_CHARS
    with pytest.raises(ValueError, match=r"^payload\.times:"):
        await ReferenceProvider().render(
            repeat(b'{"text": "a", "times": %d}' % (MAX_RENDER_CHARS + 1))
        )


async def test_render_answers_in_the_requested_format() -> None:
    provider = ReferenceProvider()
    payload = b'{"text": "*a_b* ", "times": 2}'
    plain = await provider.render(repeat(payload, RenderFormat.PLAIN_TEXT))
    assert (plain.text, plain.format) == ("*a_b* *a_b* ", RenderFormat.PLAIN_TEXT)
    unspecified = await provider.render(repeat(payload))
    assert (unspecified.text, unspecified.format) == ("*a_b* *a_b* ", RenderFormat.PLAIN_TEXT)
    markdown = await provider.render(repeat(payload, RenderFormat.MARKDOWN))
    assert markdown.format == RenderFormat.MARKDOWN
    assert markdown.text == r"\*a\_b\* \*a\_b\* "
    echo = await provider.render(
        RenderRequest(
            payload_type="reference.echo", payload=b"# hi [x](y)", format=RenderFormat.MARKDOWN
        )
    )
    assert (echo.text, echo.format) == (r"\# hi \[x\]\(y\)", RenderFormat.MARKDOWN)


async def test_render_unknown_format_value_is_invalid_argument(running: Running) -> None:
    body = b"\x0a\x0ereference.echo\x12\x02hi\x18\x4d"  # format = 77
    with pytest.raises(GRPCError) as info:
        await raw_unary(running, "Render", body, RenderResponse)
    assert info.value.status == Status.INVALID_ARGUMENT
    assert (info.value.message or "").startswith("format: unknown RenderFormat value 77")


async def test_render_empty_payload_type_is_invalid_argument(client: ModelClient) -> None:
    with pytest.raises(GRPCError) as info:
        await client.render(RenderRequest(payload_type="", payload=b"x"), timeout=5)
    assert info.value.status == Status.INVALID_ARGUMENT
    assert (info.value.message or "").startswith("payload_type: must be non-empty")


async def test_render_bad_payload_is_invalid_argument_over_grpc(client: ModelClient) -> None:
    with pytest.raises(GRPCError) as info:
        await client.render(repeat(b'{"text": "ab", "times": -1}'), timeout=5)
    assert info.value.status == Status.INVALID_ARGUMENT
    assert (info.value.message or "").startswith("payload.times:")
