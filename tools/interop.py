#!/usr/bin/env python3
"""Generate TypeScript and Go from proto/, compile them strictly, and check all three languages
agree on the wire with the Python server.

Steps (each printed; the first failure ends the run with exit status 1):

``typescript``  copy ``interop/ts`` into a temporary folder, ``npm ci`` (the pinned
                ``@bufbuild/protoc-gen-es``, ``@bufbuild/protobuf``, ``typescript`` and
                ``@types/node`` of its package-lock.json, from the npm registry),
                ``buf generate`` with protoc-gen-es (``target=ts``), then ``tsc --strict``.
``go``          ``buf generate`` with Debian's protoc-gen-go in managed mode (``go_package``
                under ``protocolpy.interop/gen``), ``go build`` and ``go vet`` against Debian's
                ``google.golang.org/protobuf`` sources (no module download: ``GOPROXY=off``).
``wire``        start ``protocol-py serve`` (the built-in reference provider) on a free
                loopback port; stream four completions (a tool call with thinking, a signed
                tool call carrying 1.1 vendor data, a paused turn, a plain answer) and keep
                the raw event bytes; the TypeScript program and the Go program
                decode them: every event's proto3 JSON must equal google's upb decoding (Python)
                of the same bytes, and the TypeScript re-encoding must parse back to the same
                message. Then the TypeScript program encodes a StreamCompletionRequest; the
                server must accept those bytes unchanged and answer with text and a ``stop``.
``go-plugin``   build the Go kernel of ``examples/go_kernel`` in GOPATH mode over Debian's
                ``/usr/share/gocode`` (hashicorp/go-plugin 1.0.1, grpc-go 1.33, the protoc-gen-go
                messages of ``model.v1``; ``GO111MODULE=off``, nothing downloaded) and run it
                against ``protocol-py serve --handshake`` unchanged, four times: plaintext and
                AutoMTLS, each on the default unix socket and on TCP (``--host 127.0.0.1``,
                port from go-plugin's ``PLUGIN_MIN_PORT``..``PLUGIN_MAX_PORT``). Each run must
                Ping, list the models, Configure (and have a bad config refused with
                INVALID_ARGUMENT), stream a tool call ending in ``STOP_REASON_TOOL_USE``, get
                UNIMPLEMENTED for an unknown method and an unknown service, and Kill the plugin
                gracefully (exit status 0) in under :data:`KILL_LIMIT` seconds with nothing left
                in its private ``TMPDIR``. A fifth run exits without Kill (a crashed kernel):
                the plugin must exit by itself within :data:`ORPHAN_LIMIT` seconds, leaving
                ``TMPDIR`` empty.

Needs ``node``/``npm`` (Node.js >= 20) and Debian's ``golang-go``, ``protoc-gen-go``,
``golang-google-protobuf-dev``, ``golang-github-hashicorp-go-plugin-dev``,
``golang-google-grpc-dev`` and ``golang-github-golang-protobuf-1-5-dev`` (``.ci/run`` installs
them). Run it with the interpreter that
has the dev extra: ``.venv/bin/python tools/interop [--keep]``. ``--keep`` leaves the temporary
folder for inspection. Exit status: 0 when every step passed, 1 otherwise, 2 for a missing
tool or a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from google.protobuf import json_format, message_factory  # type: ignore[import-untyped]
from grpclib.client import Channel
from grpclib.const import Cardinality
from grpclib.encoding.base import CodecBase

from protocol_py.server import build_descriptor_pool
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.google.protobuf import Struct
from protocol_py_gen.model.v1 import GenerationParams, StreamCompletionRequest, ToolDeclaration

REPO_ROOT = Path(__file__).resolve().parent.parent
TS_SOURCES = ("package.json", "package-lock.json", ".npmrc", "tsconfig.json", "main.ts")
GO_PROTOBUF_SRC = Path("/usr/share/gocode/src/google.golang.org/protobuf")
"""Where Debian's golang-google-protobuf-dev puts google.golang.org/protobuf (override with
the ``GO_PROTOBUF_SRC`` environment variable)."""
GOCODE = Path("/usr/share/gocode")
"""Debian's GOPATH tree of Go sources (go-plugin, grpc-go, protobuf; override with the
``GOCODE`` environment variable)."""
GO_KERNEL_PACKAGE = "protocolpy.example/go_kernel"
"""The Go kernel's import path in the temporary GOPATH (its generated messages sit under
``protocolpy.example/gen``)."""
KILL_LIMIT = 1.0
"""Seconds go-plugin's Kill may take (its forced path waits 2 s, then SIGKILLs)."""
ORPHAN_LIMIT = 5.0
"""Seconds a plugin whose go-plugin kernel exited without Kill gets to exit by itself."""

STREAM_METHOD = "/model.v1.ModelService/StreamCompletion"
SERVER_START_TIMEOUT = 30.0
"""Seconds allowed for ``protocol-py serve`` to print its handshake line."""
STEP_TIMEOUT = 600.0
"""Seconds allowed for any one external command (npm ci, tsc, go build, ...)."""
TS_MESSAGE_ID = "01JD7Q3V5W6X7Y8Z9A0B1C2D3E"
"""The ULID the TypeScript program gives its user message."""


class StepFailedError(Exception):
    """One step failed; the message says why."""


class RawCodec(CodecBase):
    """grpclib codec that sends bytes unchanged and returns replies undecoded."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        """The message is already its encoding."""
        return bytes(message)

    def decode(self, data: bytes, message_type: Any) -> Any:
        """Leave the reply as bytes."""
        return data


def tool_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for external tools: this interpreter's bin directory first on PATH."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.update(extra or {})
    return env


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run one command, echoing it; its stdout. Raises StepFailedError (with its output)."""
    print("+ " + " ".join(cmd), flush=True)
    try:
        done = subprocess.run(
            cmd,
            cwd=cwd,
            env=env or tool_env(),
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StepFailedError(f"{cmd[0]}: {exc}") from None
    if done.returncode != 0:
        raise StepFailedError(
            f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done.stdout


def buf_generate(template: dict[str, Any]) -> None:
    """``buf generate proto`` with an inline template."""
    buf = shutil.which("buf", path=tool_env()["PATH"]) or "buf"
    run([buf, "generate", "proto", "--template", json.dumps(template)], REPO_ROOT)


def require_tools() -> None:
    """Exit 2 naming what is missing."""
    missing = [t for t in ("node", "npm", "go", "protoc-gen-go") if shutil.which(t) is None]
    if missing:
        sys.exit(
            f"tools/interop: missing {', '.join(missing)}: install Node.js >= 20 and "
            "Debian's golang-go, protoc-gen-go and golang-google-protobuf-dev"
        )


def step_typescript(work: Path) -> Path:
    """Generate and compile the TypeScript side; the folder holding ``build/main.js``."""
    ts = work / "ts"
    ts.mkdir()
    for name in TS_SOURCES:
        shutil.copy2(REPO_ROOT / "interop" / "ts" / name, ts / name)
    run(["npm", "ci", "--no-audit", "--no-fund"], ts)
    plugin = ts / "node_modules" / ".bin" / "protoc-gen-es"
    buf_generate(
        {
            "version": "v2",
            "plugins": [
                {
                    "local": str(plugin),
                    "out": str(ts / "gen"),
                    "opt": ["target=ts", "import_extension=js"],
                    "include_imports": True,
                }
            ],
        }
    )
    run([str(ts / "node_modules" / ".bin" / "tsc"), "-p", ".", "--strict"], ts)
    return ts


def step_go(work: Path) -> Path:
    """Generate, build and vet the Go side; the built ``interop`` binary."""
    go = work / "go"
    go.mkdir()
    source = Path(os.environ.get("GO_PROTOBUF_SRC", GO_PROTOBUF_SRC))
    if not (source / "go.mod").is_file():
        raise StepFailedError(f"google.golang.org/protobuf sources not found at {source}")
    template = (REPO_ROOT / "interop" / "go" / "go.mod.in").read_text()
    (go / "go.mod").write_text(template.replace("@GO_PROTOBUF_SRC@", str(source)))
    shutil.copy2(REPO_ROOT / "interop" / "go" / "main.go", go / "main.go")
    buf_generate(
        {
            "version": "v2",
            "managed": {
                "enabled": True,
                "override": [
                    {"file_option": "go_package_prefix", "value": "protocolpy.interop/gen"}
                ],
            },
            "plugins": [
                {"local": "protoc-gen-go", "out": str(go / "gen"), "opt": ["paths=source_relative"]}
            ],
        }
    )
    env = tool_env(
        {
            "GOPROXY": "off",
            "GOFLAGS": "-mod=mod",
            "GOCACHE": str(work / "gocache"),
            "GOPATH": str(work / "gopath"),
            "GO111MODULE": "on",
        }
    )
    run(["go", "build", "-o", "interop", "."], go, env)
    run(["go", "vet", "./..."], go, env)
    return go / "interop"


def python_requests() -> list[bytes]:
    """The requests whose answers the other languages decode: a tool call with thinking, a
    signed tool call (protocol 1.1 vendor data), a paused turn (1.1 STOP_REASON_PAUSE_TURN)
    and a plain answer (together they carry every event kind but ``error`` and
    ``safety_notice``)."""
    tool = ToolDeclaration(
        name="get_weather",
        description="Current weather for a city.",
        input_schema=Struct.from_dict(
            {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            }
        ),
    )
    requests = []
    for index, (text, tools) in enumerate(
        [
            ("Please use tool get_weather for Paris.", [tool]),
            ("A signed tool call to get_weather, please.", [tool]),  # 1.1: vendor data
            ("Pause turn here, then go on.", []),  # 1.1: STOP_REASON_PAUSE_TURN
            ("Say hello in one line.", []),
        ]
    ):
        request = StreamCompletionRequest(
            model_id="reference-large",
            call_context=CallContext(session_id="py-session", turn_id=f"py-turn-{index}"),
            messages=[
                Message(
                    role=Role.USER,
                    id=f"01JD7Q3V5W6X7Y8Z9A0B1C2D4{index}",
                    content=[ContentBlock(text=TextBlock(text=text))],
                )
            ],
            tools=tools,
            params=GenerationParams(thinking_effort="low"),
        )
        requests.append(bytes(request))
    return requests


async def stream_raw(port: int, request: bytes) -> list[bytes]:
    """One StreamCompletion with raw bytes both ways."""
    channel = Channel("127.0.0.1", port, codec=RawCodec())
    try:
        async with channel.request(
            STREAM_METHOD, Cardinality.UNARY_STREAM, bytes, bytes, timeout=60
        ) as stream:
            await stream.send_message(request, end=True)
            return [bytes(event) async for event in stream]
    finally:
        channel.close()


def start_server() -> tuple[subprocess.Popen[str], int]:
    """``protocol-py serve --port 0 --handshake``; the process and its port."""
    script = Path(sys.executable).parent / "protocol-py"
    process = subprocess.Popen(
        [str(script), "serve", "--port", "0", "--handshake"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=tool_env(),
    )
    assert process.stdout is not None
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    line = ""
    while time.monotonic() < deadline and not line:
        line = process.stdout.readline().strip()
        if process.poll() is not None:
            break
    fields = line.split("|")
    if len(fields) < 4 or fields[1] != "tcp":
        process.kill()
        raise StepFailedError(f"protocol-py serve printed no usable handshake line: {line!r}")
    return process, int(fields[2].rsplit(":", 1)[1])


def delimited(frames: list[bytes]) -> bytes:
    """Frames with protobuf's size-delimited framing (a varint length before each)."""
    out = bytearray()
    for frame in frames:
        size = len(frame)
        while True:
            byte = size & 0x7F
            size >>= 7
            out.append(byte | (0x80 if size else 0))
            if not size:
                break
        out += frame
    return bytes(out)


def step_wire(work: Path, ts: Path, go_binary: Path) -> str:
    """The wire agreement checks; a one-line summary."""
    pool = build_descriptor_pool()
    if pool is None:
        raise StepFailedError("descriptor image gen/descriptor/protocol.binpb not found")
    event_class = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("model.v1.StreamEvent")
    )
    request_class = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("model.v1.StreamCompletionRequest")
    )
    process, port = start_server()
    try:
        frames = [f for r in python_requests() for f in asyncio.run(stream_raw(port, r))]
        events_path = work / "events.bin"
        events_path.write_bytes(delimited(frames))
        expected = [event_class.FromString(f) for f in frames]
        expected_json = [json_format.MessageToDict(e) for e in expected]
        cases = sorted({e.WhichOneof("event") for e in expected})
        reasons = {
            json_format.MessageToDict(e)["stop"].get("reason")
            for e in expected
            if e.HasField("stop")
        }
        signed = [
            e
            for e in expected
            if (e.HasField("tool_call_start") and e.tool_call_start.vendor_data)
            or (e.HasField("tool_call_done") and e.tool_call_done.vendor_data)
        ]
        if "STOP_REASON_PAUSE_TURN" not in reasons or not signed:
            raise StepFailedError(
                f"the sample lacks a 1.1 addition (stop reasons {sorted(reasons)}, "
                f"{len(signed)} tool-call events with vendor data)"
            )

        run(["node", "build/main.js", "decode", str(events_path), str(work / "ts.json")], ts)
        ts_events = json.loads((work / "ts.json").read_text())["events"]
        run([str(go_binary), str(events_path), str(work / "go.json")], work)
        go_events = json.loads((work / "go.json").read_text())
        for language, got in (("TypeScript", [e["json"] for e in ts_events]), ("Go", go_events)):
            if len(got) != len(expected_json):
                raise StepFailedError(
                    f"{language} decoded {len(got)} events, Python {len(expected)}"
                )
            for index, (theirs, ours) in enumerate(zip(got, expected_json, strict=True)):
                if theirs != ours:
                    raise StepFailedError(
                        f"{language} event {index} differs:\n  {language}: {theirs}\n"
                        f"  Python (upb): {ours}"
                    )
        for index, (event, message) in enumerate(zip(ts_events, expected, strict=True)):
            if event_class.FromString(base64.b64decode(event["binary"])) != message:
                raise StepFailedError(
                    f"TypeScript re-encoding of event {index} decodes differently"
                )

        request_path = work / "request.bin"
        run(
            [
                "node",
                "build/main.js",
                "encode-request",
                "reference-large",
                TS_MESSAGE_ID,
                "Hello from TypeScript",
                str(request_path),
            ],
            ts,
        )
        request_bytes = request_path.read_bytes()
        request_class.FromString(request_bytes)  # well-formed for upb too
        answer = [event_class.FromString(f) for f in asyncio.run(stream_raw(port, request_bytes))]
        kinds = [a.WhichOneof("event") for a in answer]
        if not answer or kinds[-1] != "stop" or "text_delta" not in kinds or "error" in kinds:
            raise StepFailedError(f"the server did not accept the TypeScript request: {answer!r}")
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
    reason = json_format.MessageToDict(answer[-1])["stop"].get("reason")
    return (
        f"{len(frames)} StreamEvents ({', '.join(cases)}) decode identically in Python (upb), "
        f"TypeScript and Go; the TypeScript request ({len(request_bytes)} bytes) was answered "
        f"with {len(answer)} events ending in stop {reason}"
    )


def step_go_plugin_build(work: Path) -> Path:
    """Build ``examples/go_kernel`` on Debian's go-plugin in GOPATH mode; the binary."""
    gocode = Path(os.environ.get("GOCODE", GOCODE))
    plugin_src = gocode / "src" / "github.com" / "hashicorp" / "go-plugin"
    if not (plugin_src / "client.go").is_file():
        raise StepFailedError(f"hashicorp/go-plugin sources not found under {gocode}")
    gopath = work / "gopath"
    package = gopath / "src" / GO_KERNEL_PACKAGE
    package.mkdir(parents=True)
    for source in sorted((REPO_ROOT / "examples" / "go_kernel").glob("*.go")):
        shutil.copy2(source, package / source.name)
    buf_generate(
        {
            "version": "v2",
            "managed": {
                "enabled": True,
                "override": [
                    {"file_option": "go_package_prefix", "value": "protocolpy.example/gen"}
                ],
            },
            "plugins": [
                {
                    "local": "protoc-gen-go",
                    "out": str(gopath / "src" / "protocolpy.example" / "gen"),
                    "opt": ["paths=source_relative"],
                }
            ],
        }
    )
    env = tool_env(
        {
            "GO111MODULE": "off",
            "GOPATH": f"{gopath}{os.pathsep}{gocode}",
            "GOCACHE": str(work / "gocache"),
            "GOPROXY": "off",
            "GOFLAGS": "",
        }
    )
    binary = work / "go_kernel"
    run(["go", "build", "-o", str(binary), GO_KERNEL_PACKAGE], work, env)
    run(["go", "vet", GO_KERNEL_PACKAGE], work, env)
    return binary


def run_go_kernel(binary: Path, tmpdir: Path, flags: list[str], serve: list[str]) -> dict[str, Any]:
    """One run of the Go kernel with its own ``TMPDIR``; its JSON report."""
    script = Path(sys.executable).parent / "protocol-py"
    command = [str(binary), *flags, "--", str(script), "serve", "--handshake", *serve]
    print("+ " + " ".join(command), flush=True)
    try:
        done = subprocess.run(
            command,
            cwd=tmpdir,
            env=tool_env({"TMPDIR": str(tmpdir)}),
            stdin=subprocess.DEVNULL,  # go-plugin hands the kernel's stdin to the plugin
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise StepFailedError(f"the Go kernel did not finish: {' '.join(command)}") from None
    try:
        report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise StepFailedError(
            f"the Go kernel printed no report (exit {done.returncode}):\n{done.stdout}{done.stderr}"
        ) from None
    if done.returncode != 0 or report.get("errors"):
        raise StepFailedError(f"the Go kernel failed (exit {done.returncode}): {report}")
    return report


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie not yet reaped by init counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in ("Z", "X")


def step_go_plugin(work: Path) -> str:
    """Run the Go kernel against ``protocol-py serve --handshake``; a one-line summary."""
    binary = step_go_plugin_build(work)
    expected = {
        "negotiated_version": 1,
        "ping": "ok",
        "configure": "OK",
        "configure_refused": "InvalidArgument",
        "stop_reason": "STOP_REASON_TOOL_USE",
        "unknown_method": "Unimplemented",
        "unknown_service": "Unimplemented",
        "exited": True,
        "exit_code": 0,
        "tmpdir_left_behind": [],
    }
    kills: list[str] = []
    for tls in (False, True):
        for network, serve in (("unix", []), ("tcp", ["--host", "127.0.0.1"])):
            tmpdir = Path(tempfile.mkdtemp(prefix="tmp-", dir=work))
            report = run_go_kernel(binary, tmpdir, [f"-auto-mtls={str(tls).lower()}"], serve)
            what = f"{network}, {'AutoMTLS' if tls else 'plaintext'}"
            wrong = {k: report.get(k) for k, v in expected.items() if report.get(k) != v}
            if report.get("network") != network or report.get("auto_mtls") is not tls:
                wrong["network/auto_mtls"] = (report.get("network"), report.get("auto_mtls"))
            if "reference-large" not in (report.get("models") or []):
                wrong["models"] = report.get("models")
            if "tool_call_done" not in (report.get("event_kinds") or []):
                wrong["event_kinds"] = report.get("event_kinds")
            if not report.get("kill_seconds", KILL_LIMIT) < KILL_LIMIT:
                wrong["kill_seconds"] = report.get("kill_seconds")
            if wrong:
                raise StepFailedError(f"Go kernel over {what}: unexpected {wrong}; report {report}")
            kills.append(f"{what} {report['kill_seconds']:.3f} s ({report['events']} events)")
    tmpdir = Path(tempfile.mkdtemp(prefix="tmp-", dir=work))
    report = run_go_kernel(binary, tmpdir, ["-orphan"], [])
    pid = int(report["plugin_pid"])
    deadline = time.monotonic() + ORPHAN_LIMIT
    while not process_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if not process_gone(pid):
        os.kill(pid, 9)
        raise StepFailedError(f"the plugin outlived its Go kernel by {ORPHAN_LIMIT:g} s")
    left = sorted(p.name for p in tmpdir.iterdir())
    if left:
        raise StepFailedError(f"the orphaned plugin left {left} in its TMPDIR")
    return f"Kill: {'; '.join(kills)}; orphaned plugin exited by itself, TMPDIR empty"


def main(argv: list[str] | None = None) -> int:
    """Run the steps; 0 when all passed."""
    parser = argparse.ArgumentParser(prog="tools/interop", description=__doc__.split("\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    require_tools()
    work = Path(tempfile.mkdtemp(prefix="protocol-py-interop-"))
    try:
        print("== typescript", flush=True)
        ts = step_typescript(work)
        print("== typescript: ok (tsc --strict)", flush=True)
        print("== go", flush=True)
        go_binary = step_go(work)
        print("== go: ok (go build, go vet)", flush=True)
        print("== wire", flush=True)
        summary = step_wire(work, ts, go_binary)
        print(f"== wire: ok: {summary}", flush=True)
        print("== go-plugin", flush=True)
        summary = step_go_plugin(work)
        print(f"== go-plugin: ok: {summary}", flush=True)
    except StepFailedError as exc:
        print(f"tools/interop: FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("tools/interop: all 4 steps passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
