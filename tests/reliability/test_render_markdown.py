"""A Markdown Render never holds the event loop, its output
size is checked before the work, and a deadline or cancel stops the escaping."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from protocol_py.providers.reference import render as reference
from protocol_py_gen.model.v1 import RenderFormat, RenderRequest, RenderResponse

from .conftest import Served, acall, still_serving


def markdown_render(payload_type: str, payload: bytes) -> bytes:
    return bytes(
        RenderRequest(payload_type=payload_type, payload=payload, format=RenderFormat.MARKDOWN)
    )


def repeat(text: str, times: int) -> bytes:
    return json.dumps({"text": text, "times": times}).encode()


async def test_markdown_repeat_whose_escaped_size_exceeds_the_limit_is_refused_first(
    served: Served, logs: Any
) -> None:
    # 64 Mi '<' is within MAX_RENDER_CHARS as plain text; escaped it would be 128 Mi.
    times = reference.MAX_RENDER_CHARS // 8
    result = await acall(
        served.address, "Render", markdown_render("reference.repeat", repeat("<" * 8, times))
    )
    print(f"refused in {result.seconds:.3f} s")
    assert result.code == "INVALID_ARGUMENT", result
    assert result.details.startswith("payload.times: the Markdown result"), result.details
    assert f"{2 * reference.MAX_RENDER_CHARS} characters" in result.details
    assert str(reference.MAX_RENDER_CHARS) in result.details
    assert result.seconds < 10.0  # generous: the refusal does no escaping work at all
    await still_serving(served)


async def test_a_16_mib_markdown_repeat_is_escaped_correctly(served: Served) -> None:
    result = await acall(
        served.address, "Render", markdown_render("reference.repeat", repeat("<" * 8, 1 << 20))
    )
    assert result.code == "OK", result
    reply = RenderResponse.parse(result.replies[0])
    assert reply.format == RenderFormat.MARKDOWN
    assert len(reply.text) == 16 * (1 << 20)
    assert reply.text[:6] == "\\<\\<\\<" and set(reply.text) == {"\\", "<"}
    await still_serving(served)


def test_markdown_escape_backslash_escapes_exactly_ascii_punctuation() -> None:
    text = "".join(chr(c) for c in range(0x20, 0x80)) + "é漢\n"
    escaped = reference.markdown_escape(text)
    expected = "".join(
        "\\" + ch if ch.isascii() and not ch.isalnum() and 0x21 <= ord(ch) <= 0x7E else ch
        for ch in text
    )
    assert escaped == expected
    assert reference.markdown_escape("a*b_c") == "a\\*b\\_c"


async def test_deadline_stops_a_markdown_escape_at_its_next_checkpoint(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcomes: list[str] = []
    ended = threading.Event()
    escape = reference._escape_in_chunks

    def after_the_deadline(text: str, stop: threading.Event) -> str:
        # Hold the worker until the call's deadline has cancelled it (the client gives up after
        # 1 s), then escape: the first checkpoint must stop the work.
        try:
            assert stop.wait(30.0), "the deadline never reached the worker"
            out = escape(text, stop)
        except reference._RenderCancelledError:
            outcomes.append("cancelled")
            raise
        else:
            outcomes.append("finished")
            return out
        finally:
            ended.set()

    monkeypatch.setattr(reference, "_escape_in_chunks", after_the_deadline)
    body = markdown_render("reference.echo", b"<" * (4 * 1024 * 1024))
    result = await acall(served.address, "Render", body, timeout=1.0)
    assert result.code == "DEADLINE_EXCEEDED", result
    assert await asyncio.to_thread(ended.wait, 30.0)
    assert outcomes == ["cancelled"]
    await still_serving(served)


async def test_describe_stays_fast_while_a_large_markdown_echo_is_escaped(served: Served) -> None:
    body = markdown_render("reference.echo", b"<" * (16 * 1024 * 1024))
    control = [(await acall(served.address, "Describe", b"")).seconds for _ in range(5)]
    render = asyncio.ensure_future(acall(served.address, "Render", body, timeout=120))
    during: list[float] = []
    while not render.done():
        during.append((await acall(served.address, "Describe", b"")).seconds)
    result = await render
    assert result.code == "OK", result
    assert len(RenderResponse.parse(result.replies[0]).text) == 32 * 1024 * 1024
    worst = max(during, default=0.0)
    print(
        f"Render {result.seconds:.2f} s; Describe control max {max(control):.3f} s, "
        f"during the Render max {worst:.3f} s over {len(during)} calls"
    )
    # Generous on a loaded machine; a Describe never waits for the whole escape.
    assert worst < max(1.0, 10 * max(control))
    await still_serving(served)
