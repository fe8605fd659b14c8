"""A minimal model provider: it answers by echoing the last user message, word by word.

Run it directly (``serve`` blocks until Ctrl-C; ``--port 0`` picks a free port, and the log line
``serving echo on 127.0.0.1:PORT`` on stderr says which)::

    .venv/bin/python examples/echo_provider.py --port 0

or through the command line, which loads ``path/to/file.py:Class``::

    .venv/bin/protocol-py serve --provider examples/echo_provider.py:EchoProvider --port 0

It shows every mandatory ModelSpec field, a classified failure (``ProviderError``: a prompt
containing "fail" is refused with INVALID_REQUEST) and cancellation: when the kernel cancels or
its deadline passes, the generator is closed and ``finally`` runs (close upstream I/O there).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import AsyncIterator

from protocol_py import Provider, ProviderError, serve
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
    ThinkingSpec,
    Usage,
)

log = logging.getLogger("echo_provider")


class EchoProvider(Provider):
    """Serves one model, ``echo-1``, that repeats the user's last message."""

    name = "echo"
    version = "0.1.0"
    source = "examples/echo_provider.py"

    def capabilities(self) -> Capabilities:
        return Capabilities(
            models=[
                ModelSpec(
                    id="echo-1",  # unique within the provider
                    context_window=8_000,  # tokens, > 0
                    max_output_tokens=1_000,  # tokens, > 0
                    supports_tool_use=False,
                    supports_vision=False,
                    supports_documents=False,
                    supports_streaming=True,
                    thinking=ThinkingSpec(supported=False),  # MUST be present
                    caching=CachingSpec(supported=False),  # MUST be present
                    pricing=Pricing(  # MUST be present; USD per million tokens
                        currency="USD",
                        tiers=[PricingTier(input_per_mtok=0.1, output_per_mtok=0.2)],
                    ),
                )
            ]
        )

    async def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        # The server has already validated the request against echo-1's ModelSpec.
        last = request.messages[-1]
        text = " ".join(b.text.text for b in last.content if b.text is not None)
        if "fail" in text.lower():
            raise ProviderError(
                ModelError(kind=ErrorKind.INVALID_REQUEST, message="echo-1 refuses to fail")
            )
        words = text.split()
        try:
            for i, word in enumerate(words):
                await asyncio.sleep(0)  # a real provider awaits its upstream here
                yield StreamEvent(text_delta=TextDelta(text=word if i == 0 else " " + word))
            yield StreamEvent(usage=Usage(input_tokens=len(words), output_tokens=len(words)))
            yield StreamEvent(stop=Stop(reason=StopReason.END_TURN, model_affirmed=True))
        finally:
            # Runs on completion, on error and on cancellation (GeneratorExit/CancelledError).
            log.debug("stream for turn %s closed", context.turn_id)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="serve the echo provider")
    parser.add_argument("--port", type=int, default=50051)
    args = parser.parse_args()
    serve(EchoProvider(), port=args.port)
