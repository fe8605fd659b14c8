"""``--help`` of every subcommand: a description, every option's default, consistent metavars,
the document kinds of ``validate`` and the environment variables of ``serve``; the sample
documents of docs/cli.md run as written."""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from protocol_py.cli import build_parser
from protocol_py.providers import BUILTIN, load_provider_class
from protocol_py.rules.documents import DOCUMENT_KINDS

REPO = Path(__file__).resolve().parents[2]
METAVARS = {
    "ADDRESS", "FILE", "HOST", "ID", "LEVEL", "NAME", "NUMBER", "PATH", "PORT", "PROMPT",
    "SECONDS", "SIZE", "TEXT", "TIME", "TOKENS", "URL",
}  # fmt: skip
FLAG_ACTIONS = (
    argparse._StoreTrueAction,
    argparse._HelpAction,
    argparse._VersionAction,
    argparse.BooleanOptionalAction,
)


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


SUBCOMMANDS = _subparsers()


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_subcommand_has_a_description(name: str) -> None:
    description = SUBCOMMANDS[name].description
    assert description and len(description) > 30


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_option_states_its_default_and_a_metavar_of_the_set(name: str) -> None:
    parser = SUBCOMMANDS[name]
    formatter = parser._get_formatter()
    missing, odd = [], []
    for action in parser._actions:
        if isinstance(action, FLAG_ACTIONS):
            continue
        shown = formatter._expand_help(action) if action.help else ""
        if action.option_strings and not action.required and "default" not in shown:
            missing.append(action.option_strings[0])
        if action.metavar not in METAVARS:
            odd.append((action.dest, action.metavar))
    assert (missing, odd) == ([], [])


def test_validate_help_lists_the_accepted_kinds() -> None:
    text = SUBCOMMANDS["validate"].format_help()
    assert DOCUMENT_KINDS == ("Capabilities", "ModelSpec", "Pricing")
    assert "Accepted kinds: Capabilities, ModelSpec, Pricing" in " ".join(text.split())


def environment_of(name: str) -> tuple[tuple[str, str], ...]:
    """What a built-in provider declares it reads (none for one without the hook)."""
    return getattr(load_provider_class(name), "environment_variables", tuple)()  # type: ignore[no-any-return]


def test_serve_help_names_each_providers_environment_variable() -> None:
    text = SUBCOMMANDS["serve"].format_help()
    epilog = text.split("environment variables:\n", 1)[1].splitlines()
    for name in BUILTIN:
        start = next(i for i, x in enumerate(epilog) if x.strip().startswith(name + " "))
        rest = itertools.takewhile(lambda x: x.startswith(" " * 14), epilog[start + 1 :])
        own = [epilog[start], *rest]
        variables = [x[14:].split()[0].rstrip(":") for x in own]
        assert variables == ([v for v, _ in environment_of(name)] or ["none"]), (name, own)
    assert [v for v, _ in environment_of("gemini")] == ["GEMINI_API_KEY", "GOOGLE_API_KEY"]
    assert "GOOGLE_APPLICATION_CREDENTIALS" in [v for v, _ in environment_of("vertex")]
    assert "PROTOCOL_PY_CLIENT_CERT" in text and "--no-discover" in text


def _sample_commands() -> list[str]:
    doc = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    block = doc.split("Sample inputs live in", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def _run(command: str) -> subprocess.CompletedProcess[str]:
    words = shlex.split(command)
    assert words[0] == ".venv/bin/protocol-py"
    return subprocess.run(
        [sys.executable, "-m", "protocol_py.cli", *words[1:]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_sample_documents_validate_as_the_docs_say() -> None:
    validations = [c for c in _sample_commands() if " validate " in c]
    assert len(validations) == 2
    for command in validations:
        done = _run(command)
        path = shlex.split(command)[2]
        kind = "Capabilities" if "capabilities" in path else "Pricing"
        assert (done.returncode, done.stderr) == (0, f"{path}: valid {kind}\n")


def test_sample_usage_is_priced_with_the_sample_pricing() -> None:
    (command,) = [c for c in _sample_commands() if " cost " in c]
    done = _run(command + " --json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # 250,000 input tokens select the second tier: 6/M input, 22.5/M output, 0.6/M cache read,
    # 7.5/M cache write
    assert result["tier_index"] == 1
    expected = 250_000 * 6 + 1_200 * 22.5 + 40_000 * 0.6 + 8_000 * 7.5
    assert float(result["total_usd"]) == pytest.approx(expected / 1e6)
