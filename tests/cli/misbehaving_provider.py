"""A provider of the misbehaving-provider tests (served with ``--provider FILE:Misbehaving``).

It declares no ``name`` (so it is named after its class) and picks its behaviour from the
prompt: ``raise`` raises ``KeyError('secret')``; ``slow down`` ends with an in-band
RATE_LIMITED error before any text; ``permanent`` with a PERMANENT one; ``think then stall``
streams a thinking delta and text then waits; ``extra`` yields text after ``stop``; anything
else is answered ``ok``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from protocol_py import Provider
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import (
    CachingSpec,
    Capabilities,
    ErrorKind,
    ModelError,
    ModelSpec,
    Pricing,
    PricingTier,
    Stop,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ThinkingSpec,
)


class Misbehaving(Provider):
    def capabilities(self) -> Capabilities:
        return Capabilities(
            models=[
                ModelSpec(
                    id="odd-1",
                    context_window=8_000,
                    max_output_tokens=1_000,
                    supports_streaming=True,
                    thinking=ThinkingSpec(supported=False),
                    caching=CachingSpec(supported=False),
                    pricing=Pricing(
                        currency="USD",
                        tiers=[PricingTier(input_per_mtok=0.1, output_per_mtok=0.2)],
                    ),
                )
            ]
        )

    async def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        last = request.messages[-1]
        prompt = " ".join(b.text.text for b in last.content if b.text is not None)
        stop = StreamEvent(stop=Stop(reason=StopReason.END_TURN, model_affirmed=True))
        if prompt == "raise":
            raise KeyError("secret")
        if prompt in ("slow down", "permanent"):
            kind = ErrorKind.RATE_LIMITED if prompt == "slow down" else ErrorKind.PERMANENT
            yield StreamEvent(error=ModelError(kind=kind, message=prompt, retryable=False))
            return
        if prompt == "think then stall":
            yield StreamEvent(thinking_delta=ThinkingDelta(text="hmm, let me see"))
            yield StreamEvent(text_delta=TextDelta(text="Partial"))
            await asyncio.sleep(60)
        yield StreamEvent(text_delta=TextDelta(text="ok"))
        yield stop
        if prompt == "extra":
            yield StreamEvent(text_delta=TextDelta(text="after the end"))
            yield stop
