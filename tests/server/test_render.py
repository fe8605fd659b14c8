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
        (b"[" * 500_000 + b"]" * 500_000, "payload"),  # nested past the JSON parser's limit
        (b'{"a":' * 20_000 + b"1" + b"}" * 20_000, "payload"),
        (b'{"text": "", "times": 100000000000000000000}', "payload.times"),  # no index fits
        (b'{"text": "\\ud800", "times": 2}', "payload.text"),  # a lone surrogate
        (b'{"text": "ok \\udfff", "times": 1}', "payload.text"),
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


@pytest.mark.parametrize(
    ("payload", "fmt", "message"),
    [
        (
            b"[" * 500_000 + b"]" * 500_000,
            RenderFormat.UNSPECIFIED,
            "payload: JSON nested too deeply",
        ),
        (
            b'{"text": "", "times": 100000000000000000000}',
            RenderFormat.UNSPECIFIED,
            "payload.times: more than 67108864 (MAX_RENDER_CHARS)",
        ),
        (
            b'{"text": "\\udfff", "times": 1}',
            RenderFormat.MARKDOWN,
            "payload.text: holds a lone surrogate (U+DFFF at character 0), which UTF-8 "
            "cannot carry",
        ),
    ],
)
async def test_render_payloads_no_reply_can_carry_are_invalid_argument_over_grpc(
    client: ModelClient, payload: bytes, fmt: RenderFormat, message: str
) -> None:
    """A payload nested past the JSON parser's limit, a repeat count no string index holds and
    a text UTF-8 cannot carry are the caller's errors, named by field, not INTERNAL; the
    server answers the next Render."""
    with pytest.raises(GRPCError) as info:
        await client.render(repeat(payload, fmt), timeout=10)
    assert info.value.status == Status.INVALID_ARGUMENT
    assert (info.value.message or "").startswith(message), info.value.message
    done = await client.render(repeat(b'{"text": "ab", "times": 2}'), timeout=5)
    assert done.text == "abab"
