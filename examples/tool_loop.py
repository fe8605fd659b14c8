"""A tool loop: the model calls a tool, the kernel runs it and sends the result back, until the
model ends its turn.

Start a server first (``.venv/bin/protocol-py serve``), then::

    .venv/bin/python examples/tool_loop.py 127.0.0.1:50051
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from protocol_py import Conversation, ModelClient
from protocol_py.client.conversation import tool
from protocol_py.codec.structs import from_struct
from protocol_py_gen.model.v1 import StopReason

MAX_STEPS = 5
"""Most model calls one user turn may take (a loop bound, not a protocol rule)."""

WEATHER = tool(
    "get_weather",
    "Current weather for a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def get_weather(args: dict[str, Any]) -> dict[str, Any]:
    """The tool itself (a real kernel dispatches to a tool plugin)."""
    return {"city": args.get("city"), "temperature_c": 21, "sky": "clear"}


async def main(address: str) -> None:
    async with ModelClient.connect(address) as client:
        caps = await client.get_capabilities(timeout=10)
        spec = next((m for m in caps.models if m.supports_tool_use), None)
        if spec is None:
            raise SystemExit("no served model takes tools (the reference server's do)")
        conv = Conversation(spec=spec, tools=[WEATHER])
        conv.user("What is the weather in Paris? Use get_weather.")
        for step in range(1, MAX_STEPS + 1):
            done = await client.complete(conv.request(), timeout=60)
            if done.error is not None:
                raise SystemExit(f"error: {done.error.kind.name}: {done.error.message}")
            conv.assistant(done)  # thinking, signatures and tool calls kept for replay
            assert done.stop is not None
            price = done.cost.total_usd() if done.cost is not None else "?"
            print(f"step {step}: stop {done.stop.reason.name}, cost {price} USD")
            if done.stop.reason != StopReason.TOOL_USE:
                text = "".join(b.text.text for b in done.message.content if b.text is not None)
                print(f"answer: {text}")
                return
            for call in conv.pending_tool_calls():
                args = from_struct(call.input) if call.input is not None else {}
                print(f"  tool call {call.name}({args})")
                conv.tool_result(call.id, get_weather(args))
        raise SystemExit(f"no answer after {MAX_STEPS} steps")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051"))
