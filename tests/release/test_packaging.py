"""The distribution as another repository gets it: build the wheel and the sdist, check what
they hold, install the wheel into a clean virtual environment (dependencies from the same
package index pip uses here) and serve one StreamCompletion from that environment through
google's grpcio client.

Part of the contract, so it runs in CI (marker ``packaging``; about 20-40 s with a warm pip
cache: the build needs hatchling and the install the runtime dependencies from the index).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from protocol_py.version import PACKAGE_VERSION, PROTOCOL_MAJOR

from ..support.image_classes import classes_from_image

pytestmark = pytest.mark.packaging

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGE = REPO_ROOT / "gen" / "descriptor" / "protocol.binpb"
STEP_TIMEOUT = 240.0
"""Upper bound of one build or install step, in seconds (a hang fails instead of blocking CI)."""


@dataclass
class Dists:
    wheel: Path
    sdist: Path
    timings: dict[str, float]


def timed(timings: dict[str, float], name: str, cmd: list[str], cwd: Path) -> None:
    start = time.monotonic()
    done = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=STEP_TIMEOUT, check=False
    )
    timings[name] = time.monotonic() - start
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dists]:
    out = tmp_path_factory.mktemp("dist")
    timings: dict[str, float] = {}
    timed(timings, "build", [sys.executable, "-m", "build", "--outdir", str(out), "."], REPO_ROOT)
    wheels = sorted(out.glob("*.whl"))
    sdists = sorted(out.glob("*.tar.gz"))
    assert [p.name for p in wheels] == [f"protocol_py-{PACKAGE_VERSION}-py3-none-any.whl"]
    assert [p.name for p in sdists] == [f"protocol_py-{PACKAGE_VERSION}.tar.gz"]
    yield Dists(wheels[0], sdists[0], timings)
    print(f"\npackaging timings (s): {', '.join(f'{k} {v:.1f}' for k, v in timings.items())}")


def test_wheel_holds_both_packages_py_typed_the_image_and_the_console_script(
    dists: Dists,
) -> None:
    with zipfile.ZipFile(dists.wheel) as wheel:
        names = set(wheel.namelist())
        image = wheel.read("protocol_py_gen/descriptor/protocol.binpb")
        entry_points = wheel.read(
            f"protocol_py-{PACKAGE_VERSION}.dist-info/entry_points.txt"
        ).decode()
        metadata = wheel.read(f"protocol_py-{PACKAGE_VERSION}.dist-info/METADATA").decode()
    for name in (
        "protocol_py/__init__.py",
        "protocol_py/py.typed",
        "protocol_py/server/__init__.py",
        "protocol_py/providers/reference/__init__.py",
        "protocol_py/rules/vendor_data.py",
        "protocol_py_gen/__init__.py",
        "protocol_py_gen/py.typed",
        "protocol_py_gen/model/v1/__init__.py",
        "protocol_py_gen/content/v1/__init__.py",
        "protocol_py_gen/common/v1/__init__.py",
    ):
        assert name in names, name
    assert image == IMAGE.read_bytes()
    assert "protocol-py = protocol_py.cli:main" in entry_points
    assert f"Version: {PACKAGE_VERSION}" in metadata.splitlines()
    assert not any(n.startswith(("tests/", "src/", "gen/")) for n in names)


def test_sdist_holds_sources_protos_baselines_and_image(dists: Dists) -> None:
    with tarfile.open(dists.sdist) as sdist:
        prefix = f"protocol_py-{PACKAGE_VERSION}/"
        names = {n.removeprefix(prefix) for n in sdist.getnames()}
    for name in (
        "pyproject.toml",
        "README.md",
        "CHANGELOG.md",
        "DEVELOPMENT.md",
        "docs/decisions.md",
        "src/protocol_py/__init__.py",
        "src/protocol_py/py.typed",
        "gen/python/protocol_py_gen/__init__.py",
        "gen/python/protocol_py_gen/py.typed",
        "gen/descriptor/protocol.binpb",
        "proto/model/v1/types.proto",
        "proto/content/v1/types.proto",
        "proto-baseline/protocol-1.0.binpb",
        "buf.yaml",
    ):
        assert name in names, name


def test_wheel_installed_in_a_clean_venv_serves_a_stream_to_grpcio(
    dists: Dists, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    timed(dists.timings, "venv", [sys.executable, "-m", "venv", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    timed(
        dists.timings,
        "install",
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            str(dists.wheel),
        ],
        tmp_path,
    )
    where = subprocess.run(
        [str(python), "-c", "import protocol_py, protocol_py_gen; print(protocol_py.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(venv), where  # the wheel, not this checkout

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONUNBUFFERED"] = "1"
    start = time.monotonic()
    proc = subprocess.Popen(
        [
            str(venv / "bin" / "protocol-py"),
            *("serve", "--provider", "reference", "--handshake", "--port", "0"),
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline() if ready else ""
        assert line, "no handshake line from the installed console script"
        major, transport, address, protocol = line.strip().split("|")
        assert (major, transport, protocol) == (str(PROTOCOL_MAJOR), "tcp", "grpc")
        dists.timings["serve"] = time.monotonic() - start

        with zipfile.ZipFile(dists.wheel) as wheel:
            msg = classes_from_image(wheel.read("protocol_py_gen/descriptor/protocol.binpb"))
        block = msg("content.v1.ContentBlock")(text=msg("content.v1.TextBlock")(text="Hello"))
        request = msg("model.v1.StreamCompletionRequest")(
            model_id="reference-small",
            messages=[
                msg("content.v1.Message")(role=1, id="01J0000000000000000000000A", content=[block])
            ],
            call_context=msg("common.v1.CallContext")(session_id="s", turn_id="t"),
        )
        event_type = msg("model.v1.StreamEvent")
        with grpc.insecure_channel(address) as channel:
            call = channel.unary_stream(
                "/model.v1.ModelService/StreamCompletion",
                request_serializer=type(request).SerializeToString,
                response_deserializer=event_type.FromString,
            )
            events = list(call(request, timeout=30))
        cases = [e.WhichOneof("event") for e in events]
        assert cases[0] == "stream_start" and cases[-1] == "stop"
        assert "text_delta" in cases and "usage" in cases
        text = "".join(e.text_delta.text for e in events if e.WhichOneof("event") == "text_delta")
        assert text.startswith(
            "This is reference-small, the offline reference model. You wrote: Hello"
        )
        assert events[-1].stop.reason == 1  # STOP_REASON_END_TURN
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert proc.returncode == 0
