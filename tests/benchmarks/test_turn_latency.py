"""benchmarks/turn_latency.py flags a noisy sample: an overhead that does not grow with the
message count."""

from __future__ import annotations

import sys

from ..support.proc import run_ok
from ..support.servers import REPO


def test_turn_latency_flags_an_overhead_that_does_not_grow_with_size() -> None:
    """Run in its own interpreter with ``benchmarks/`` first on ``sys.path``, as the script
    runs (it imports its sibling ``server``, which the tests' package of that name shadows)."""
    code = (
        "import sys; sys.path.insert(0, 'benchmarks'); import turn_latency as t\n"
        "s = [60, 300, 600]\n"
        "print(t.not_increasing({60: 6.2, 300: 13.1, 600: 27.1}, s))\n"
        "print(t.not_increasing({60: 6.2, 300: 13.1, 600: 11.0}, s))\n"
        "print(t.not_increasing({60: 9.0, 300: 8.0, 600: 27.1}, s))\n"
        "print(t.NOISY_WARNING)\n"
    )
    done = run_ok([sys.executable, "-c", code], cwd=REPO)
    growing, shrinking, dip, warning = done.stdout.splitlines()
    assert (growing, shrinking, dip) == ("False", "True", "True")
    assert warning.startswith("warning: the overhead does not grow with the message count")
    assert "noisy (machine load)" in warning and "rerun" in warning


def test_a_cold_turn_has_every_message_id_new_and_the_same_content() -> None:
    """The cold turns of turn_latency.py: new ids (no cache keyed by id can hit), the same
    content otherwise (the content keys are equal), and a new turn id each turn."""
    code = (
        "import sys; sys.path.insert(0, 'benchmarks'); import turn_latency as t\n"
        "from protocol_py.codec import wire\n"
        "a, b = t.conversation(4), t.conversation(4, epoch=7, turn=2)\n"
        "print(len({m.id for m in a.messages} & {m.id for m in b.messages}))\n"
        "print(len({m.id for m in a.messages} | {m.id for m in b.messages}))\n"
        "print([wire.content_key(bytes(m)) for m in a.messages]"
        " == [wire.content_key(bytes(m)) for m in b.messages])\n"
        "print(a.call_context.turn_id, b.call_context.turn_id)\n"
    )
    done = run_ok([sys.executable, "-c", code], cwd=REPO)
    assert done.stdout.splitlines() == ["0", "10", "True", "t1 t2"]
