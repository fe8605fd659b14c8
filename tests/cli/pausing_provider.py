"""A test provider loaded by path (``serve --provider tests/cli/pausing_provider.py:...``):
the reference provider whose every answer ends with ``Stop{PAUSE_TURN}`` (protocol 1.1), so a
client that continues paused turns without a bound would never stop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

from protocol_py.provider import Provider
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import Stop, StopReason, StreamCompletionRequest, StreamEvent


class AlwaysPausingProvider(ReferenceProvider):
    name = "always-pausing"

    async def _paused(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        async for event in super().stream(request, context):
            if event.stop is None:
                yield event
                continue
            yield StreamEvent(
                stop=Stop(
                    reason=StopReason.PAUSE_TURN, model_affirmed=True, vendor_reason="pause_turn"
                )
            )

    def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        return self._paused(request, context)

    @classmethod
    def from_cli(cls, *, base_url: str | None, discover: bool, env: Mapping[str, str]) -> Provider:
        return cls()
