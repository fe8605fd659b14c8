"""Statements of the README checked against the code: the ``cost --json`` keys, the client TLS
options, how to build the wheel it pins, the reference provider's ``simulate_error`` kinds and its
``reference.repeat`` example."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
from grpclib.exceptions import GRPCError

from protocol_py.cli import build_parser, main
from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import CONFIG_SCHEMA
from protocol_py.rules.cost import TERM_NAMES
from protocol_py.version import PACKAGE_VERSION
from protocol_py_gen.model.v1 import RenderRequest

from ..support.servers import REPO, Running

CLI_DOC = (REPO / "docs" / "cli.md").read_text()
REFERENCE_DOC = (REPO / "docs" / "reference-provider.md").read_text()


def documented_cost_keys() -> tuple[list[str], list[str]]:
    paragraph = CLI_DOC.split("`cost --json` prints one object with exactly these keys:", 1)[1]
    paragraph = paragraph.split("\n\n", 1)[0]
    keys = re.findall(r"`(\w+)`\s+\(", paragraph)
    terms_text = paragraph.split("each cost term,", 1)[1].split("to a USD", 1)[0]
    terms = re.findall(r"`(\w+)`", terms_text)
    return keys, terms


def test_cost_json_keys_are_exactly_those_the_readme_documents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys, terms = documented_cost_keys()
    assert keys == [
        "tier_index",
        "window_index",
        "terms",
        "total_usd",
        "free",
        "vendor_cost",
        "components",
        "request_fees",
    ]
    assert terms == list(TERM_NAMES)
    pricing = tmp_path / "pricing.json"
    pricing.write_text(
        json.dumps({"currency": "USD", "tiers": [{"inputPerMtok": 3, "outputPerMtok": 15}]})
    )
    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps({"inputTokens": 1000, "outputTokens": 10}))
    assert main(["cost", "--pricing", str(pricing), "--usage", str(usage), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == keys
    assert list(out["terms"]) == terms
    assert out["tier_index"] == 0 and out["total_usd"] == "0.00315"
    assert out["window_index"] is None


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
    # the name tests/release/test_packaging.py builds
    wheel = f"protocol_py-{PACKAGE_VERSION}-py3-none-any.whl"
    assert f"pip install {wheel}" in pinning  # builds with `python -m build`
    assert f"# {wheel}" in pinning
    # the release commit first (a clone may have no tags), the tag where a copy has it
    releases = json.loads((REPO / "proto-baseline/RELEASES.json").read_text(encoding="utf-8"))
    commit = next(e["commit"] for e in releases["releases"] if e["version"] == PACKAGE_VERSION)
    assert f"git checkout {commit}   # {PACKAGE_VERSION}\n" in pinning
    assert f"`git checkout v{PACKAGE_VERSION}` before the wheel build" in pinning
    assert "python -m build --wheel" in pinning and "pip wheel --no-deps -w dist ." in pinning
    assert "Releases are tagged `vX.Y.Z`" in pinning
    assert pinning.index("### The release image") < pinning.index("### Where your copy has")


async def test_readme_simulate_error_kinds_and_repeat_payload_are_the_reference_providers(
    running: Running,
) -> None:
    """README "The built-in reference provider" lists every simulate_error.kind the Configure
    schema accepts, and its reference.repeat example renders as it says."""
    listed = REFERENCE_DOC.split("`kind` is the ErrorKind in\n  lowercase, one of ", 1)[1]
    listed = listed.split("; any other", 1)[0]
    kinds = [k.strip().strip("`") for k in listed.replace("\n", " ").split(",")]
    accepted = CONFIG_SCHEMA["properties"]["simulate_error"]["properties"]["kind"]["enum"]
    assert kinds == accepted
    async with ModelClient.connect(running.address) as client:
        for kind in kinds:
            await client.configure({"simulate_error": {"kind": kind}}, timeout=30)
        with pytest.raises(GRPCError, match="simulate_error"):
            await client.configure({"simulate_error": {"kind": "unspecified"}}, timeout=30)
        payload = json.dumps({"text": "ab", "times": 3}).encode()
        request = RenderRequest(payload_type="reference.repeat", payload=payload)
        assert (await client.render(request, timeout=30)).text == "ababab"
