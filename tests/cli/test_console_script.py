"""``protocol-py``: version, validate, cost, serve errors, and chat/capabilities/describe plus the
grpclib client against the server started by the real console script."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from protocol_py.cli import main
from protocol_py.client.client import ModelClient, parse_address
from protocol_py.errors import InvalidValueError
from protocol_py.providers.reference import ReferenceProvider, tokenize
from protocol_py.rules.cost import format_usd
from protocol_py.version import PACKAGE_VERSION, PROTOCOL_VERSION
from protocol_py_gen.model.v1 import StopReason

from ..support.servers import CONSOLE_SCRIPT, Subprocess, load_case, make_request


def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert (
        capsys.readouterr().out == f"protocol-py {PACKAGE_VERSION} (protocol {PROTOCOL_VERSION})\n"
    )


def test_validate_valid_and_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    caps = ReferenceProvider().capabilities()
    caps.protocol_version = "1.0"
    good = write(tmp_path, "caps.json", caps.to_json())
    assert main(["validate", good]) == 0
    assert capsys.readouterr().out == ""
    spec = json.loads(caps.to_json())["models"][0]
    spec["contextWindow"] = "0"
    spec["thinking"]["effort"]["default"] = "ultra"
    bad = write(tmp_path, "spec.json", spec)
    assert main(["validate", bad]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 2
    assert all(len(line.split(": ", 2)) == 3 for line in lines)
    assert any(line.startswith("context_window: ") for line in lines)
    assert any("thinking.effort.default" in line for line in lines)
    not_json = write(tmp_path, "x.json", "{nope")
    assert main(["validate", not_json]) == 1
    assert "file.not_json" in capsys.readouterr().out
    assert main(["validate", str(tmp_path / "missing.json")]) == 1
    assert "file.unreadable" in capsys.readouterr().out


PRICING = {"currency": "USD", "tiers": [{"inputPerMtok": 3, "outputPerMtok": 15}]}


def test_cost_worked_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pricing = write(tmp_path, "p.json", PRICING)
    usage = write(tmp_path, "u.json", {"inputTokens": "412", "outputTokens": 28})
    assert main(["cost", "--pricing", pricing, "--usage", usage, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tier_index"] == 0
    assert out["total_usd"] == "0.001656"
    assert out["terms"]["input"] == "0.001236" and out["terms"]["output"] == "0.00042"
    assert main(["cost", "--pricing", pricing, "--usage", usage]) == 0
    text = capsys.readouterr().out
    assert "0.001656 USD" in text and "pricing: tier 1" in text


def test_cost_c13_rates_parsed_exactly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = load_case("C13")
    rows = case["input"]["rows"]
    expected = case["expected"]["costs"]
    for variant in ("string", "number"):
        for row, want in zip(
            [rows[0], rows[1], rows[3]], [expected[0], expected[1], expected[3]], strict=True
        ):
            rates = case["input"]["pricing_json"][row["model"]]
            tier = {
                "inputPerMtok": rates["input_per_mtok"]
                if variant == "string"
                else float(rates["input_per_mtok"]),
                "outputPerMtok": rates["output_per_mtok"]
                if variant == "string"
                else float(rates["output_per_mtok"]),
            }
            pricing = write(tmp_path, "p.json", {"currency": "USD", "tiers": [tier]})
            usage = write(
                tmp_path, "u.json", {"inputTokens": row["input"], "outputTokens": row["output"]}
            )
            assert main(["cost", "--pricing", pricing, "--usage", usage, "--json"]) == 0
            total = json.loads(capsys.readouterr().out)["total_usd"]
            assert total == want
            assert "E" not in total and Decimal(total) == Decimal(want)


def test_cost_refuses_a_rate_a_double_cannot_carry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        '{"currency": "USD", "tiers": '
        '[{"inputPerMtok": 0.1000000000000000000001, "outputPerMtok": 1}]}'
    )
    pricing = write(tmp_path, "p.json", text)
    usage = write(tmp_path, "u.json", {"inputTokens": 1})
    assert main(["cost", "--pricing", pricing, "--usage", usage]) == 1
    err = capsys.readouterr().err
    assert "tiers[0].inputPerMtok" in err and "cannot be carried exactly by a double" in err
    # Every key spelling protojson accepts for a rate is checked, betterproto2's too.
    for key in ("cacheWrite1hPerMtok", "cache_write_1h_per_mtok", "cacheWrite1HPerMtok"):
        text = (
            '{"currency": "USD", "tiers": [{"inputPerMtok": 1, "cacheWritePerMtok": 1, '
            f'"{key}": 2.0000000000000000000001}}]}}'
        )
        pricing = write(tmp_path, "p.json", text)
        assert main(["cost", "--pricing", pricing, "--usage", usage]) == 1
        err = capsys.readouterr().err
        assert f"tiers[0].{key}: 2.0000000000000000000001 cannot be carried exactly" in err


def test_cost_time_tier_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tiers = {
        "currency": "USD",
        "tiers": [
            {"effectiveUntil": "2026-07-01", "inputPerMtok": 1, "outputPerMtok": 2},
            {"effectiveFrom": "2026-07-01", "inputPerMtok": 10, "outputPerMtok": 20},
        ],
    }
    pricing = write(tmp_path, "p.json", tiers)
    usage = write(tmp_path, "u.json", {"inputTokens": 1000000})
    assert (
        main(
            [
                "cost",
                "--pricing",
                pricing,
                "--usage",
                usage,
                "--at",
                "2026-06-30T23:59:59Z",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["total_usd"] == "1"
    assert (
        main(["cost", "--pricing", pricing, "--usage", usage, "--at", "2026-07-01", "--json"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert (out["tier_index"], out["total_usd"]) == (1, "10")
    assert (
        main(["cost", "--pricing", pricing, "--usage", usage, "--at", "2026-07-01T00:00:00"]) == 2
    )
    assert "--at" in capsys.readouterr().err
    assert main(["cost", "--pricing", str(tmp_path / "none.json"), "--usage", usage]) == 1
    assert "cannot read" in capsys.readouterr().err
    bad_usage = write(tmp_path, "bad.json", {"inputTokens": "many"})
    assert main(["cost", "--pricing", pricing, "--usage", bad_usage]) == 1
    assert "input_tokens: json.invalid" in capsys.readouterr().err


def test_usage_errors_exit_2_without_traceback() -> None:
    for args in (
        ["serve", "--provider", "nope"],
        ["serve", "--max-message-size", "lots"],
        ["frobnicate"],
        ["cost", "--pricing", "x"],
    ):
        done = run_cli(*args)
        assert done.returncode == 2, args
        assert "Traceback" not in done.stderr
        assert done.stderr.strip()
    done = run_cli("serve", "--provider", "nope")
    assert "unknown provider 'nope'" in done.stderr


def test_chat_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "--server", "127.0.0.1:1", "hi"]) == 1
    err = capsys.readouterr().err
    assert "cannot connect to 127.0.0.1:1" in err
    assert main(["chat", "--server", "127.0.0.1:notaport", "hi"]) == 2


def test_parse_address() -> None:
    assert parse_address("127.0.0.1:50051") == ("127.0.0.1", 50051)
    assert parse_address("[::1]:7") == ("::1", 7)
    assert parse_address("localhost") == ("localhost", 50051)
    with pytest.raises(InvalidValueError):
        parse_address("host:0")


def test_chat_capabilities_describe_against_console_script(cli_server: Subprocess) -> None:
    done = run_cli("chat", "--server", cli_server.address, "--system", "Be brief.", "Hello there")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("[thinking] The user wrote 2 words")
    assert "You wrote: Hello there" in done.stdout
    last = lines[-1]
    assert last.startswith("tokens: input ") and " USD" in last and "stop: end_turn" in last
    # the same prompt again: the system prefix is read from the prompt cache
    again = run_cli("chat", "--server", cli_server.address, "--system", "Be brief.", "Hello there")
    assert "cache read" in again.stdout.splitlines()[-1]
    small = run_cli("chat", "--server", cli_server.address, "--model", "reference-small", "hi")
    assert small.returncode == 0
    # reference-small: $0.1 in / $0.4 out per million tokens; "hi" is 6 prompt tokens
    answer = small.stdout.splitlines()[0]
    out_tokens = len(tokenize(answer))
    total = (Decimal(6) * Decimal("0.1") + Decimal(out_tokens) * Decimal("0.4")) / 10**6
    assert small.stdout.splitlines()[-1] == (
        f"tokens: input 6, output {out_tokens}; cost: {format_usd(total)} USD; stop: end_turn"
    )
    unknown = run_cli("chat", "--server", cli_server.address, "--model", "nope", "hi")
    assert unknown.returncode == 2 and "unknown model 'nope'" in unknown.stderr
    table = run_cli("capabilities", "--server", cli_server.address)
    assert table.returncode == 0
    rows = table.stdout.splitlines()
    assert rows[0].split()[:3] == ["MODEL", "CONTEXT", "MAX"]
    assert rows[1].startswith("reference-large") and "effort low/medium/high/max" in rows[1]
    assert " ".join((rows[3] + rows[4]).split()) == (
        "pricing (USD): $3 in / $15 out / $0.3 cache read per Mtok (tier 1 of 2: prompts below "
        "200,000 tokens)"
    )
    small_row = next(r for r in rows if r.startswith("reference-small"))
    assert small_row.split() == ["reference-small", "32000", "4096", "no", "no"]
    assert max(len(r) for r in rows) <= 100
    as_json = run_cli("capabilities", "--server", cli_server.address, "--json")
    assert '"cacheWrite1hPerMtok": 6' in as_json.stdout  # the protoc JSON name
    assert [m["id"] for m in json.loads(as_json.stdout)["models"]] == [
        "reference-large",
        "reference-medium",
        "reference-small",
    ]
    described = run_cli("describe", "--server", cli_server.address)
    assert "name:             reference" in described.stdout
    assert f"protocol_version: {PROTOCOL_VERSION}" in described.stdout


async def test_grpclib_client_against_console_script(cli_server: Subprocess) -> None:
    async with ModelClient.connect(cli_server.address) as client:
        caps = await client.get_capabilities(timeout=5)
        assert caps.protocol_version == PROTOCOL_VERSION
        before = datetime.now(UTC)
        result = await client.complete(
            make_request("What does it cost?", model="reference-large"), timeout=10
        )
        assert result.stop is not None and result.stop.reason is StopReason.END_TURN
        assert result.message.role.name == "ASSISTANT" and len(result.message.id) == 26
        assert result.message.produced_by_model_id == "reference-large"
        assert result.received_at is not None and result.received_at >= before
        assert result.usage is not None and result.cost is not None
        usage = result.usage
        expected = (
            Decimal(usage.input_tokens) * 3
            + Decimal(usage.output_tokens) * 15
            + Decimal(usage.cache_read_tokens or 0) * Decimal("0.3")
            + Decimal(usage.cache_write_tokens or 0) * Decimal("3.75")
        ) / Decimal(1_000_000)
        assert result.cost.tier_index == 0
        assert result.cost.total == expected
        events = [
            e async for e in client.stream(make_request("stream me", model="reference-small"))
        ]
        assert events[-1].stop is not None
