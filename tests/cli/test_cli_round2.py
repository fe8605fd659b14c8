"""``protocol-py`` CLI fixes for tester 3: ``--at`` takes the timestamp alone (no surrounding
whitespace, #8), and a subcommand's usage errors name the subcommand (#9)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol_py.cli.app import main


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    pricing = tmp_path / "p.json"
    pricing.write_text(
        json.dumps({"currency": "USD", "tiers": [{"inputPerMtok": 1, "outputPerMtok": 2}]})
    )
    usage = tmp_path / "u.json"
    usage.write_text(json.dumps({"inputTokens": 1000000}))
    return str(pricing), str(usage)


@pytest.mark.parametrize("at", ["2026-07-01T00:00:00Z ", " 2026-07-01", "2026-07-01\n"])
def test_cost_at_with_surrounding_whitespace_is_a_usage_error(
    files: tuple[str, str], at: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pricing, usage = files
    assert main(["cost", "--pricing", pricing, "--usage", usage, "--at", at]) == 2
    err = capsys.readouterr().err
    assert err.startswith("protocol-py cost: --at: ")
    assert "whitespace" in err


@pytest.mark.parametrize("at", ["20260701T000000Z", "2026-W27-3", "2026-07-01T00Z"])
def test_cost_at_forms_outside_the_documented_set_are_usage_errors(
    files: tuple[str, str], at: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pricing, usage = files
    assert main(["cost", "--pricing", pricing, "--usage", usage, "--at", at]) == 2
    assert "is not an ISO 8601" in capsys.readouterr().err


def test_cost_help_lists_the_accepted_at_forms(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["cost", "--help"])
    out = "".join(capsys.readouterr().out.split())  # argparse wraps lines, even at hyphens
    assert "YYYY-MM-DDTHH:MM[:SS[.fraction]]" in out
    assert "nobasicformat,weekorordinaldates" in out


@pytest.mark.parametrize(
    ("argv", "prefix"),
    [
        (["version", "--x"], "protocol-py version: error: unrecognized arguments: --x"),
        (
            ["validate", "a.json", "b.json"],
            "protocol-py validate: error: unrecognized arguments: b.json",
        ),
        (
            ["cost", "--pricing", "p", "--usage", "u", "--zz"],
            "protocol-py cost: error: unrecognized arguments: --zz",
        ),
        (["describe", "extra"], "protocol-py describe: error: unrecognized arguments: extra"),
    ],
)
def test_leftover_arguments_are_reported_by_the_subcommand(
    argv: list[str], prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == prefix
    assert err.startswith(f"usage: protocol-py {argv[0]} ")


def test_top_level_usage_errors_still_name_the_program(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith("protocol-py: error: ")


def test_validate_prints_json_problems_and_rule_violations_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.json"
    path.write_text(
        json.dumps(
            {"currency": "EUR", "tiers": [{"inputPerMtok": 1, "outputPerMtok": -1, "bogus": 1}]}
        )
    )
    assert main(["validate", str(path)]) == 1
    captured = capsys.readouterr()
    rules = [line.split(": ")[1] for line in captured.out.splitlines()]
    assert rules == [
        "json.unknown_field",
        "pricing.currency_not_usd",
        "pricing.tiers.rate_negative",
    ]
    assert captured.err.strip() == f"{path}: Pricing: 3 error(s)"


def test_validate_marks_a_newer_minor_protocol_version_as_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = {
        "protocolVersion": "1.9",
        "models": [
            {
                "id": "m",
                "contextWindow": 10,
                "maxOutputTokens": 5,
                "thinking": {},
                "caching": {},
                "pricing": {"currency": "USD", "free": True},
            }
        ],
    }
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    assert main(["validate", str(path)]) == 0
    captured = capsys.readouterr()
    (line,) = captured.out.splitlines()
    assert line.startswith("protocol_version: capabilities.protocol_version.newer_minor: ")
    assert line.endswith(" (warning)")
    assert captured.err.strip() == f"{path}: valid Capabilities"
