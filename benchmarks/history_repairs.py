"""Benchmark: what the history repairs (dangling tool calls, wire tool-call ids;
``providers/http/history.py``) add to an OpenAI-compatible body built from a warm translation
cache, on a growing tool-loop conversation.

Usage: ``.venv/bin/python benchmarks/history_repairs.py [TURNS] [REPEATS]`` (default TURNS = 300,
REPEATS = 7).

Builds a conversation of TURNS tool turns (an assistant message with text and one call, then a
user message with its result: 2 x TURNS + 1 messages) and, for each of the last 20 turns, the
body of the request that extends the previous one by one turn, the way the server builds it
(wire images known, translation cache warm). Prints the median per-turn wall time over REPEATS
runs with the repairs (what is sent) and with them replaced by a no-op (the baseline, measured
in the same run), and the ratio.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import protocol_py.providers.openai.request as openai_request
from protocol_py.codec import wire
from protocol_py.providers import catalog
from protocol_py.providers.http.history import HistoryMemo
from protocol_py.providers.http.translation_cache import TranslationCache
from protocol_py.providers.openai.request import OpenAICompat, build_openai_content
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol_py_gen.model.v1 import StreamCompletionRequest


def conversation(turns: int) -> list[Message]:
    messages = [Message(role=Role.USER, id="u", content=[ContentBlock(text=TextBlock(text="go"))])]
    for i in range(turns):
        messages.append(
            Message(
                role=Role.ASSISTANT,
                id=f"a{i}",
                content=[
                    ContentBlock(text=TextBlock(text="reading " * 30)),
                    ContentBlock(tool_use=ToolUseBlock(id=f"call_{i}", name="read_file")),
                ],
            )
        )
        result = ToolResultBlock(
            tool_use_id=f"call_{i}", content=[ContentBlock(text=TextBlock(text="line " * 40))]
        )
        messages.append(
            Message(role=Role.USER, id=f"r{i}", content=[ContentBlock(tool_result=result)])
        )
    return messages


class _SameIds:
    def __call__(self, kernel_id: str) -> str:
        return kernel_id


def per_turn_seconds(messages: list[Message], repeats: int) -> float:
    spec = next(m for m in catalog.openai_models() if m.id == "gpt-6-sol")
    compat = OpenAICompat()
    times = []
    for _ in range(repeats):
        openai_request.HISTORY = HistoryMemo()  # cold memo per run, as the cache
        cache = TranslationCache()
        ends = range(len(messages) - 40, len(messages) + 1, 2)
        requests = [StreamCompletionRequest(model_id=spec.id, messages=messages[:n]) for n in ends]
        images: list[list[bytes | None]] = [[wire.encode(m) for m in r.messages] for r in requests]
        build_openai_content(requests[0], spec, compat, cache, images[0])  # warm
        start = time.perf_counter()
        for request, image in zip(requests[1:], images[1:], strict=True):
            build_openai_content(request, spec, compat, cache, image)
        times.append((time.perf_counter() - start) / (len(requests) - 1))
    return statistics.median(times)


def main(turns: int = 300, repeats: int = 7) -> None:
    messages = conversation(turns)
    with_repairs = per_turn_seconds(messages, repeats)
    real_plan = HistoryMemo.plan

    def no_repairs(self: HistoryMemo, *args: Any, **kwargs: Any) -> Any:
        return None, _SameIds()

    HistoryMemo.plan = no_repairs  # type: ignore[method-assign]
    try:
        baseline = per_turn_seconds(messages, repeats)
    finally:
        HistoryMemo.plan = real_plan  # type: ignore[method-assign]
    print(f"{2 * turns + 1} messages, median per turn over {repeats} runs")
    print(f"  baseline (no repairs): {baseline * 1e3:.3f} ms")
    print(f"  with repairs:          {with_repairs * 1e3:.3f} ms  ({with_repairs / baseline:.2f}x)")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
