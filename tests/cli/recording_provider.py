"""A test provider loaded by path (``serve --provider tests/cli/recording_provider.py:...``):
the reference provider that appends one JSON line per StreamCompletionRequest to the file named
by ``$RECORD_FILE`` (roles, ids, call_context, and each thinking block's signature), so tests
can see what a client replayed."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping

from protocol_py.provider import Provider
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import StreamCompletionRequest, StreamEvent


def summarize(request: StreamCompletionRequest) -> dict[str, object]:
    return {
        "session_id": request.call_context.session_id if request.call_context else "",
        "turn_id": request.call_context.turn_id if request.call_context else "",
        "messages": [
            {
                "role": m.role.name,
                "id": m.id,
                "blocks": [
                    "thinking:" + b.thinking.signature.decode()
                    if b.thinking is not None
                    else ("tool_use:" + b.tool_use.id)
                    if b.tool_use is not None
                    else ("tool_result:" + b.tool_result.tool_use_id)
                    if b.tool_result is not None
                    else "text"
                    for b in m.content
                ],
            }
            for m in request.messages
        ],
        "params": bool(request.params),
        "tools": [t.name for t in request.tools],
    }


class RecordingProvider(ReferenceProvider):
    name = "recording"

    def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        with open(os.environ["RECORD_FILE"], "a", encoding="utf-8") as handle:
            handle.write(json.dumps(summarize(request)) + "\n")
        return super().stream(request, context)

    @classmethod
    def from_cli(cls, *, base_url: str | None, discover: bool, env: Mapping[str, str]) -> Provider:
        return cls()


class NotAProvider:
    """A class that is not a Provider (``serve`` must refuse it)."""


class BrokenProvider(ReferenceProvider):
    """A provider whose constructor fails."""

    def __init__(self) -> None:
        raise RuntimeError("cannot reach the license server")
