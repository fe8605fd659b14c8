"""benchmarks/turn_latency.py flags a noisy sample (an overhead that does not grow with the
message count) and builds its cold turns; turn_stages.py times its stages around its sweep."""

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


def test_turn_stages_sweeps_memory_between_encode_and_decode_and_times_each_stage() -> None:
    """benchmarks/turn_stages.py ``--sweep-mib``: every 64th byte of the buffer is read and
    written back (its bytes unchanged), and the stages are timed around the sweep, not over
    it: each stage of a small conversation is timed, and none takes near the time of the
    sweep between them."""
    code = (
        "import sys, time; sys.path.insert(0, 'benchmarks'); import turn_stages as t\n"
        "buf = bytearray(range(256)) * 4\n"
        "t._sweep(buf)\n"
        "print(buf == bytearray(range(256)) * 4)\n"
        "big = bytearray(256 << 20)\n"
        "start = time.perf_counter(); t._sweep(big); swept = time.perf_counter() - start\n"
        "got = t.stages(4, 2, sweep=big)\n"
        "print(sorted(got))\n"
        "print(all(v > 0 for v in got.values()), max(got.values()) < swept / 4)\n"
    )
    done = run_ok([sys.executable, "-c", code], cwd=REPO)
    unchanged, names, timed = done.stdout.splitlines()
    assert unchanged == "True"
    assert names == str(
        sorted(
            [
                "client encode",
                "server decode",
                "validation",
                "translation + JSON (context-window count)",
            ]
        )
    )
    assert timed == "True True"


def test_the_upb_kernel_rows_send_the_request_modelclient_sends() -> None:
    """turn_latency.py's upb-kernel rows time the same request as its ModelClient rows: what
    upb serializes from the message it parsed from the codec's encoding has the same size and
    parses to the same message, warm and cold (map entries may come in another order: protobuf
    leaves it open)."""
    code = (
        "import sys; sys.path.insert(0, 'benchmarks'); import turn_latency as t\n"
        "from protocol_py.codec import wire\n"
        "from protocol_py.server.grpc_layer.limits import strict_request_classes\n"
        "from protocol_py.server.reflection import build_descriptor_pool\n"
        "from protocol_py_gen.model.v1 import StreamCompletionRequest\n"
        "upb = strict_request_classes(build_descriptor_pool())[StreamCompletionRequest]\n"
        "for r in (t.conversation(30), t.conversation(30, epoch=3, turn=5)):\n"
        "    data = wire.encode(r)\n"
        "    sent = upb.FromString(data).SerializeToString()\n"
        "    print(upb.FromString(sent) == upb.FromString(data), len(sent) == len(data) > 5000)\n"
    )
    done = run_ok([sys.executable, "-c", code], cwd=REPO)
    assert done.stdout.splitlines() == ["True True", "True True"]
