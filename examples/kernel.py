"""The kernel side in a few lines: connect, pick a model with ``route``, stream, accumulate,
price.

Start a server first (``.venv/bin/protocol-py serve``), then::

    .venv/bin/python examples/kernel.py 127.0.0.1:50051

The request asks for thinking at effort "low". The fallback chain prefers the cheapest model,
reference-small, which has no thinking, so ``route`` skips it (and says why) and picks the next
model that accepts the request. Against a server where no model thinks (for example
``examples/echo_provider.py``), it asks again without thinking.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime

from protocol_py import Conversation, ModelClient, StreamAccumulator, cost, route
from protocol_py_gen.model.v1 import GenerationParams, ModelSpec, ModelTarget


def input_price(spec: ModelSpec) -> float:
    """The first pricing tier's input rate, USD per million tokens (validated specs have one)."""
    tiers = spec.pricing.tiers if spec.pricing is not None else []
    return tiers[0].input_per_mtok if tiers else 0.0


async def main(address: str) -> None:
    async with ModelClient.connect(address) as client:
        provider = (await client.describe(timeout=10)).name
        caps = await client.get_capabilities(timeout=10)  # validated
        specs = sorted(caps.models, key=input_price)
        chain = [ModelTarget(provider=provider, spec=spec) for spec in specs]

        conv = Conversation(specs[0].id, params=GenerationParams(thinking_effort="low"))
        conv.system("Answer in one sentence.")
        conv.user("Why is the sky blue?")
        chosen = route(conv.request(), chain)
        print(chosen.explain())
        if chosen.index is None:  # no served model thinks: ask again without thinking
            conv.params = None
            chosen = route(conv.request(), chain)
            print(f"without thinking: {chosen.explain()}")
        if chosen.index is None:
            raise SystemExit(1)
        spec = specs[chosen.index]
        conv.model_id, conv.spec = spec.id, spec  # the kernel rewrites model_id on fallback

        accumulator = StreamAccumulator(produced_by_model_id=spec.id, produced_by_provider=provider)
        received_at = None
        async for event in client.stream(conv.request(), timeout=60):
            if event.text_delta is not None:
                print(event.text_delta.text, end="", flush=True)
            if event.usage is not None:
                received_at = datetime.now(UTC)  # the price tier is the one in force now
            accumulator.feed(event)
        print()
        result = accumulator.result()
        if result.error is not None:
            raise SystemExit(f"error: {result.error.kind.name}: {result.error.message}")
        thinking = [b.thinking for b in result.message.content if b.thinking is not None]
        signed = sum(1 for t in thinking if t.signature)
        print(f"thinking blocks: {len(thinking)}, signed: {signed}")
        assert result.usage is not None and result.stop is not None
        assert spec.pricing is not None  # GetCapabilities was validated: pricing is present
        price = cost(spec.pricing, result.usage, received_at or datetime.now(UTC))
        print(f"stop: {result.stop.reason.name}; cost: {price.total_usd()} USD")
        conv.assistant(result)  # the next turn replays it, thinking and signatures included


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051"))
