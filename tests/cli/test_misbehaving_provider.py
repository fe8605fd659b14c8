"""A provider that raises, errs in band, yields after its stop or stalls
(``misbehaving_provider.py``), served by the console script: one log line per failure without the
exception's value, tracebacks only at DEBUG, one warning for events after the stop, and what
``chat`` prints for each."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..support.servers import Subprocess, spawn_server
from ._console import cli, stop_server

MISBEHAVING = f"{Path(__file__).with_name('misbehaving_provider.py')}:Misbehaving"


@pytest.fixture(scope="module")
def odd_server() -> Iterator[Subprocess]:
    sub = spawn_server("--provider", MISBEHAVING)
    try:
        yield sub
    finally:
        if sub.proc.poll() is None:
            sub.proc.kill()
            sub.proc.communicate(timeout=30)


def records(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def test_provider_exception_is_one_line_without_its_value_and_in_band_errors_get_detail() -> None:
    sub = spawn_server("--provider", MISBEHAVING)
    try:
        raised = cli("chat", "--server", sub.address, "raise")
        assert (raised.returncode, raised.stderr) == (
            1,
            "protocol-py chat: PERMANENT: internal provider error (KeyError)\n",
        )
        limited = cli("chat", "--server", sub.address, "slow down")
        assert limited.stderr == "protocol-py chat: RATE_LIMITED: slow down\n"
        permanent = cli("chat", "--server", sub.address, "permanent")
        assert permanent.stderr == "protocol-py chat: PERMANENT: permanent\n"
        assert cli("chat", "--server", sub.address, "still there?").returncode == 0
    finally:
        err = stop_server(sub)
    assert "secret" not in err and "Traceback" not in err
    text = [line for line in err.splitlines() if not line.startswith("{")]
    (error_line,) = [line for line in text if " ERROR " in line]
    source = Path(MISBEHAVING.rpartition(":")[0]).read_text().splitlines()
    line = source.index('            raise KeyError("secret")') + 1
    assert error_line.endswith(
        "ERROR protocol_py.server provider Misbehaving: StreamCompletion raised KeyError at "
        f"misbehaving_provider.py:{line} in stream"
    )
    streams = [r for r in records(err) if r["rpc"] == "StreamCompletion"]
    assert [(r["error_kind"], r["detail"]) for r in streams if "error_kind" in r] == [
        ("PERMANENT", "internal provider error (KeyError)"),
        ("RATE_LIMITED", "slow down"),
        ("PERMANENT", "permanent"),
    ]


def test_full_traceback_only_at_debug() -> None:
    sub = spawn_server("--provider", MISBEHAVING, "--log-level", "DEBUG")
    try:
        assert cli("chat", "--server", sub.address, "raise").returncode == 1
    finally:
        err = stop_server(sub)
    assert "DEBUG protocol_py.server provider Misbehaving: StreamCompletion traceback" in err
    assert "Traceback (most recent call last)" in err


def test_a_provider_yielding_after_stop_gets_one_warning_and_the_client_stream_is_unchanged() -> (
    None
):
    sub = spawn_server("--provider", MISBEHAVING)
    try:
        done = cli("chat", "--server", sub.address, "extra")
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[0] == "ok" and "after the end" not in done.stdout
        assert cli("chat", "--server", sub.address, "plain").returncode == 0
    finally:
        err = stop_server(sub)
    warnings = [line for line in err.splitlines() if " WARNING " in line]
    assert len(warnings) == 1
    assert warnings[0].endswith(
        "provider Misbehaving yielded an event after its final event (stop or error); it was "
        "dropped and the provider's stream closed"
    )
    assert [r["outcome"] for r in records(err) if r["rpc"] == "StreamCompletion"] == ["ok", "ok"]


def test_in_band_error_before_any_text_prints_nothing_on_stdout(odd_server: Subprocess) -> None:
    done = cli("chat", "--server", odd_server.address, "slow down")
    assert (done.returncode, done.stdout) == (1, "")


def test_mid_stream_deadline_counts_the_text_and_thinking_shown(odd_server: Subprocess) -> None:
    done = cli("chat", "--server", odd_server.address, "--timeout", "2", "think then stall")
    assert done.returncode == 1
    assert done.stdout == "[thinking] hmm, let me see\nPartial\n"
    assert done.stderr == (
        "protocol-py chat: deadline of 2s passed mid-stream after 2 event(s) (7 characters of "
        "text and 15 of thinking shown, no stop event); the answer above is incomplete\n"
    )


def test_a_failed_interactive_turn_says_it_was_dropped(odd_server: Subprocess) -> None:
    done = cli("chat", "--server", odd_server.address, stdin="slow down\nhello\n")
    assert done.returncode == 0
    assert done.stderr == (
        "protocol-py chat: RATE_LIMITED: slow down; the turn was dropped; the session goes on\n"
    )
    assert done.stdout.startswith("ok\n")
