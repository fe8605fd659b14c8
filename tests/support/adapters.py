"""Shared helpers for the adapter tests: case and fixture loading, event comparison, a
provider served over gRPC."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import betterproto2
import pytest

from protocol_py.client.client import ModelClient
from protocol_py.provider import Provider
from protocol_py.providers.anthropic.stream import AnthropicStreamTranslator
from protocol_py.providers.http.errors import error_from_http
from protocol_py.providers.http.sse import SSEParser
from protocol_py.providers.openai.stream import OpenAIStreamTranslator
from protocol_py.server import ModelServer
from protocol_py_gen.model.v1 import StreamEvent

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "testdata" / "cases"
VENDOR = REPO / "testdata" / "vendor"
SHARED_RECORDED = Path(
    os.environ.get("PROTOCOL_PY_SHARED_RECORDED")
    or REPO.parent / "shared" / "fixtures" / "vendor" / "recorded"
)
"""The third-party recordings (``PROTOCOL_PY_SHARED_RECORDED`` overrides the path)."""
RECORDED_ABSENT = (
    "../shared/fixtures/vendor/recorded is absent: third-party recordings are not in this checkout"
)


def load_case(case_id: str) -> dict[str, Any]:
    """Load testdata/cases/<id>.json."""
    with (CASES / f"{case_id}.json").open(encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def lines_to_bytes(lines: list[str], terminator: str = "\n") -> bytes:
    """Frame a case's ``lines`` array as an SSE body (every line, including the last, ended)."""
    return "".join(line + terminator for line in lines).encode("utf-8")


def case_chunks(text: str) -> bytes:
    """Decode a case chunk written with literal ``\\n``/``\\r`` escapes and ``<U+XXXX>`` marks."""
    out = text.replace("\\r", "\r").replace("\\n", "\n")
    while "<U+" in out:
        i = out.index("<U+")
        j = out.index(">", i)
        out = out[:i] + chr(int(out[i + 3 : j], 16)) + out[j + 1 :]
    return out.encode("utf-8")


def kind(event: StreamEvent) -> str:
    """The oneof case of an event."""
    name, _ = betterproto2.which_one_of(event, "event")
    return name


def kinds(events: list[StreamEvent]) -> list[str]:
    """The oneof cases of a list of events."""
    return [kind(e) for e in events]


# --- translation helpers -----------------------------------------------------------------


def translate_body(
    vendor: str, status: int, headers: dict[str, str], body: bytes, **settings: Any
) -> list[StreamEvent]:
    """Run a whole response through the vendor's translator (pure, no network)."""
    anthropic = vendor == "anthropic"
    if not 200 <= status < 300:
        err = error_from_http(
            status,
            body,
            headers,
            request_id_header="request-id" if anthropic else "x-request-id",
            anthropic=anthropic,
        )
        return [StreamEvent(error=err)]
    translator: AnthropicStreamTranslator | OpenAIStreamTranslator
    if anthropic:
        translator = AnthropicStreamTranslator(headers)
    else:
        translator = OpenAIStreamTranslator(headers, **settings)
    parser = SSEParser()
    out: list[StreamEvent] = []
    for sse in parser.feed(body):
        out.extend(translator.on_event(sse))
    parser.close()
    out.extend(translator.on_eof())
    return out


def fixture_files(folder: Path) -> list[Path]:
    """The transcript .json files of a fixtures folder."""
    return sorted(p for p in folder.glob("*.json"))


def transcript_params(
    folder: Path, *, streams_only: bool = False, absent_reason: str | None = None
) -> list[Any]:
    """pytest params (id = file stem) for a fixtures folder's transcripts.

    ``streams_only`` keeps HTTP 200 transcripts. When ``absent_reason`` is given and the folder
    does not exist, one placeholder param skipped with that reason is returned, so the run's
    output names the skip instead of the cases silently vanishing.
    """
    if not folder.is_dir():
        if absent_reason is None:
            return []
        return [pytest.param(None, id="recorded-absent", marks=pytest.mark.skip(absent_reason))]
    paths = fixture_files(folder)
    if streams_only:
        paths = [p for p in paths if load_fixture(p)[0]["http"]["status"] == 200]
    return [pytest.param(p, id=p.stem) for p in paths]


def load_fixture(path: Path) -> tuple[dict[str, Any], bytes]:
    """A transcript's JSON and its body bytes."""
    with path.open(encoding="utf-8") as fh:
        meta: dict[str, Any] = json.load(fh)
    body = (path.parent / meta["body_file"]).read_bytes()
    return meta, body


def fixture_vendor(meta: dict[str, Any]) -> str:
    """anthropic or openai-compatible."""
    return "anthropic" if meta["vendor"] == "anthropic" else "openai"


async def served_client(provider: Provider) -> AsyncIterator[ModelClient]:
    """``async for client in served_client(provider)``: ``provider`` served by a ModelServer on
    127.0.0.1 (port 0) and a connected client for the loop body; both closed afterwards."""
    server = ModelServer(provider)
    port = await server.start("127.0.0.1", 0)
    client = ModelClient.connect(f"127.0.0.1:{port}")
    try:
        yield client
    finally:
        client.close()
        await server.shutdown(grace_period=0)
