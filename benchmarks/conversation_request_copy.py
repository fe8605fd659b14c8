"""Benchmark: what copying a Conversation's request would cost (``Conversation.request()``
shares the history's Message objects; docs/writing-a-kernel.md, "Building requests").

Usage: ``.venv/bin/python benchmarks/conversation_request_copy.py [MESSAGES] [REPEATS]`` (default
MESSAGES = 600, REPEATS = 7).

Builds a history of MESSAGES text messages (user and assistant alternating, about 250 and 420
characters), then prints the median wall time over REPEATS runs of ``conv.request()`` (the
baseline, measured in the same run), ``copy.deepcopy(request)`` and a copy through the wire
(``StreamCompletionRequest.parse(bytes(request))``), with each one's ratio to the baseline.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from collections.abc import Callable

from protocol_py.client.conversation import Conversation, text
from protocol_py_gen.content.v1 import Message, Role
from protocol_py_gen.model.v1 import StreamCompletionRequest


def median_seconds(action: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(messages: int = 600, repeats: int = 7) -> None:
    conv = Conversation("bench")
    for i in range(messages // 2):
        conv.user(f"question {i} " + "word " * 48)
        conv.assistant(Message(role=Role.ASSISTANT, id=f"a{i}", content=[text("answer " * 60)]))
    request = conv.request()
    base = median_seconds(conv.request, repeats)
    print(f"{len(conv.messages)} messages, median of {repeats} runs")
    print(f"  conv.request()          {base * 1e3:8.2f} ms  1.00x")
    for name, action in (
        ("copy.deepcopy(request)", lambda: copy.deepcopy(request)),
        ("parse(bytes(request))", lambda: StreamCompletionRequest.parse(bytes(request))),
    ):
        took = median_seconds(action, repeats)
        print(f"  {name:<22}  {took * 1e3:8.2f} ms  {took / base:.2f}x")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
