"""``protocol-py`` fixes for the second new user's findings (issues 10 and 11 polish):
``capabilities`` shows the rates of the recurring pricing window that applies now, ``cost --json``
names that window (``window_index``), TLS option errors without the address hint, ``--timeout``
bounding the TLS connect, ``chat`` continuing a paused turn."""

from __future__ import annotations

import argparse
import json
import re
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from protocol_py.cli.app import CONNECT_TIMEOUT, TABLE_WIDTH, build_parser, capabilities_table, main
from protocol_py.cli.chat import MAX_PAUSE_CONTINUATIONS, PAUSE_MARKER, TURN_DROPPED
from protocol_py.codec import protojson
from protocol_py.providers.catalog import deepseek_models
from protocol_py.version import PACKAGE_VERSION

from . import test_chat_session as chat_session
from ._security import CA, run_cli
from .conftest import REPO, Subprocess, spawn_server
from .test_chat_session import chat, records, still_serving

PAUSING = REPO / "tests" / "server" / "pausing_provider.py"

# A Tuesday: 11:00 UTC is in DeepSeek's off-peak window 10:00-24:00 Mon-Fri (window 3 of 4),
# 02:00 UTC in the peak hours 01:00-04:00 (the tier's own rates).
OFF_PEAK = datetime(2026, 12, 1, 11, 0, tzinfo=UTC)
PEAK = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)


def _pricing_text(rows: list[str]) -> str:
    flash = rows.index(next(r for r in rows if r.startswith("deepseek-flash")))
    text = []
    for row in rows[flash + 1 :]:
        if row and not row.startswith(" "):
            break
        text.append(row.strip())
    return " ".join(text)


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        (  # inside window 3 (10:00-24:00 Mon-Fri): its rates, then the tier's outside windows
            OFF_PEAK,
            "pricing (USD): now (window 3 of 4 recurring windows): $0.15 in / $0.6 out / $0.003 "
            "cache read per Mtok; outside: $0.3 in / $1.2 out / $0.006 cache read per Mtok",
        ),
        (  # peak hours: the tier's own rates, and that the tier has 4 windows
            PEAK,
            "pricing (USD): now (outside its 4 recurring windows): $0.3 in / $1.2 out / $0.006 "
            "cache read per Mtok",
        ),
    ],
)
def test_capabilities_shows_the_rates_that_apply_now_and_the_window_count(
    at: datetime, expected: str
) -> None:
    rows = capabilities_table(deepseek_models(), at=at)
    assert max(len(r) for r in rows) <= TABLE_WIDTH
    assert _pricing_text(rows) == expected


@pytest.mark.parametrize(
    ("at", "window_index", "total"),
    [("2026-12-01T11:00:00Z", 2, "0.21"), ("2026-12-01T02:00:00Z", None, "0.42")],
)
def test_cost_json_names_the_window_that_applied_zero_based(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    at: str,
    window_index: int | None,
    total: str,
) -> None:
    pricing = tmp_path / "pricing.json"  # deepseek-flash: $0.3/$1.2, off-peak windows at half
    flash = deepseek_models()[0].pricing
    assert flash is not None
    pricing.write_text(protojson.dumps(flash))
    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps({"inputTokens": 1_000_000, "outputTokens": 100_000}))
    argv = ["cost", "--pricing", str(pricing), "--usage", str(usage), "--at", at, "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["tier_index"], out["window_index"], out["total_usd"]) == (0, window_index, total)


# -- chat continues a paused turn (protocol 1.1 STOP_REASON_PAUSE_TURN) ------------------------


recorded = chat_session.recorded  # the recording provider fixture (requests as JSON lines)


def _stops(stdout: str) -> list[str]:
    return [line.rsplit("stop: ", 1)[1] for line in stdout.splitlines() if "; stop: " in line]


def test_one_shot_chat_continues_a_paused_turn_to_its_end(
    recorded: tuple[Subprocess, Path],
) -> None:
    sub, record = recorded
    done = chat(sub.address, "please pause turn now")
    assert done.returncode == 0, done.stderr
    assert _stops(done.stdout) == ["pause_turn", "end_turn"]
    assert done.stderr.count(PAUSE_MARKER) == 1
    first, second = records(record)
    assert [m["role"] for m in second["messages"]] == ["USER", "ASSISTANT"]  # paused, sent back
    assert second["turn_id"] == first["turn_id"]  # the same turn continues


def test_interactive_history_holds_the_paused_and_continued_messages_of_the_turn(
    recorded: tuple[Subprocess, Path],
) -> None:
    sub, record = recorded
    done = chat(sub.address, stdin="please pause turn now\nand then hello\n")
    assert done.returncode == 0, done.stderr
    assert _stops(done.stdout) == ["pause_turn", "end_turn", "end_turn"]
    assert done.stderr.count(PAUSE_MARKER) == 1 and "dropped" not in done.stderr
    first, second, third = records(record)
    assert [m["role"] for m in first["messages"]] == ["USER"]
    assert [m["role"] for m in second["messages"]] == ["USER", "ASSISTANT"]
    roles = [m["role"] for m in third["messages"]]
    assert roles == ["USER", "ASSISTANT", "ASSISTANT", "USER"]
    assert third["messages"][1] == second["messages"][1]  # the paused message, unmodified
    assert first["turn_id"] == second["turn_id"] != third["turn_id"]


def test_chat_stops_continuing_after_the_bound_and_the_session_goes_on() -> None:
    sub = spawn_server("--provider", f"{PAUSING}:AlwaysPausingProvider")
    try:
        once = chat(sub.address, "hello")
        assert once.returncode == 1
        assert _stops(once.stdout) == ["pause_turn"] * (MAX_PAUSE_CONTINUATIONS + 1)
        assert once.stderr.count(PAUSE_MARKER) == MAX_PAUSE_CONTINUATIONS
        assert once.stderr.splitlines()[-1] == (
            "protocol-py chat: the model paused the turn again after 8 continuations in a row; "
            "stopped continuing; the answer above is incomplete"
        )
        session = chat(sub.address, stdin="hello\n")  # the turn is dropped, the session ends
        assert session.returncode == 1
        assert session.stderr.rstrip().endswith(f"incomplete; {TURN_DROPPED}")
        assert sub.proc.poll() is None and still_serving(sub.address)
    finally:
        sub.proc.terminate()
        sub.proc.communicate(timeout=15)


# -- client TLS options: their own error, and --timeout bounding the TLS connect ----------------


@pytest.mark.parametrize("command", ["describe", "capabilities", "chat"])
def test_tls_cert_without_key_is_named_alone_without_the_address_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    ca = CA(tmp_path)
    client = ca.issue("client", client=True)
    extra = ["hello"] if command == "chat" else []
    argv = [command, "--server", "127.0.0.1:9", "--tls-ca", str(ca.cert)]
    assert main([*argv, "--tls-cert", str(client.cert), *extra]) == 2
    assert capsys.readouterr().err == (
        f"protocol-py {command}: --tls-cert and --tls-key must be given together\n"
    )


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A TCP listener on 127.0.0.1 that accepts (the kernel's backlog) but never answers, not
    even the TLS ServerHello."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.parametrize("command", ["describe", "capabilities", "chat"])
def test_timeout_bounds_the_tls_connect_to_a_silent_listener(
    tmp_path: Path, silent_listener: str, command: str
) -> None:
    ca = CA(tmp_path)
    extra = ["hello"] if command == "chat" else []
    started = time.monotonic()
    done = run_cli(
        command, "--server", silent_listener, "--timeout", "1", "--tls-ca", str(ca.cert), *extra
    )
    elapsed = time.monotonic() - started
    print(f"{command}: failed after {elapsed:.2f}s (--timeout 1, CONNECT_TIMEOUT 10)")
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"protocol-py {command}: cannot connect to {silent_listener}: TLS handshake not "
        "completed within 1s\n"
    )
    assert elapsed < CONNECT_TIMEOUT  # interpreter start-up included; was 11.7 s before the fix


def test_readme_client_option_list_names_every_client_tls_option() -> None:
    readme = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    sentence = readme.split("Clients (`chat`, `capabilities`, `describe`, `ModelClient.connect`)")
    listed = set(re.findall(r"--tls[\w-]*", sentence[1].split("\n- ", 1)[0]))
    subparsers = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    for command in ("chat", "capabilities", "describe"):
        parser = subparsers.choices[command]
        options = {o for a in parser._actions for o in a.option_strings if o.startswith("--tls")}
        assert (
            options
            == listed
            == {"--tls", "--tls-ca", "--tls-cert", "--tls-key", "--tls-server-name"}
        )


def test_readme_pinning_says_how_to_build_the_wheel_it_tells_users_to_install() -> None:
    readme = (REPO / "docs" / "pinning.md").read_text(encoding="utf-8")
    pinning = readme.split("## Pinning the protocol version", 1)[1].split("\n## ", 1)[0]
    wheel = f"protocol_py-{PACKAGE_VERSION}-py3-none-any.whl"  # the name tests/test_packaging.py
    assert f"pip install {wheel}" in pinning  # builds with `python -m build`
    assert f"# {wheel}" in pinning
    assert f"git checkout v{PACKAGE_VERSION}\n" in pinning
    assert "python -m build --wheel" in pinning and "pip wheel --no-deps -w dist ." in pinning
    assert "Releases are tagged `vX.Y.Z`" in pinning
