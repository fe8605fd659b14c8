"""The test-certificate recipe of docs/security.md ("Certificates for a test"), run exactly as
written from an empty temporary folder: ``serve`` with its files serves mutual TLS, ``describe``
with the client's files is answered, and without them is refused."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ..support.proc import run_ok
from ..support.security import run_cli
from ..support.servers import spawn_server

REPO_ROOT = Path(__file__).resolve().parents[2]
FILES = ["ca.pem", "client.crt", "client.key", "server.crt", "server.key"]


def _recipe() -> str:
    text = (REPO_ROOT / "docs/security.md").read_text()
    match = re.search(
        r"<!-- recipe: test-certificates -->\n```python\n(.*?)\n```\n", text, re.DOTALL
    )
    assert match is not None, "no recipe test-certificates in docs/security.md"
    return match.group(1)


def test_test_certificate_recipe_gives_a_working_mutual_tls_pair(tmp_path: Path) -> None:
    run_ok([sys.executable, "-c", _recipe()], cwd=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == FILES
    f = {name: str(tmp_path / name) for name in FILES}
    sub = spawn_server(
        "--tls-cert", f["server.crt"], "--tls-key", f["server.key"],
        "--tls-client-ca", f["ca.pem"],
    )  # fmt: skip
    try:
        trust = ["--server", sub.address, "--tls-ca", f["ca.pem"]]
        answered = run_cli("describe", *trust, "--tls-cert", f["client.crt"], "--tls-key",
                           f["client.key"])  # fmt: skip
        assert answered.returncode == 0, answered.stderr
        assert "reference" in answered.stdout
        refused = run_cli("describe", *trust)
        assert refused.returncode == 1, refused.stdout
        again = run_cli("describe", *trust, "--tls-cert", f["client.crt"], "--tls-key",
                        f["client.key"])  # fmt: skip
        assert again.returncode == 0, again.stderr
    finally:
        sub.proc.terminate()
        assert sub.proc.wait(timeout=10) == 0
