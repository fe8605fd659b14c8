"""How fast a Go kernel on hashicorp/go-plugin stops ``protocol-py serve --handshake`` (Kill).

Usage: ``.venv/bin/python benchmarks/go_plugin_kill.py [REPEATS]`` (default 5). Needs what
``tools/interop``'s ``go-plugin`` step needs (Debian's golang-go, protoc-gen-go and the
go-plugin, grpc-go and protobuf sources under /usr/share/gocode).

Builds ``examples/go_kernel`` as ``tools/interop`` does, then REPEATS times per combination
(plaintext and AutoMTLS, unix socket and TCP) runs it against the plugin and keeps the time its
``client.Kill()`` took (go-plugin's GRPCController/Shutdown, then its wait for the process to
exit; go-plugin SIGKILLs after 2 s). Prints each combination's median against the median
time, measured in the same run, from SIGTERM to exit of the same plugin started in go-plugin
mode and stopped by signal (the floor any drain and interpreter exit costs here).
"""

from __future__ import annotations

import importlib.util
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SERVE = [str(Path(sys.executable).parent / "protocol-py"), "serve", "--handshake"]
GO_PLUGIN_ENV = {
    "MODEL_PLUGIN_MAGIC_COOKIE": "model.v1.ModelService",
    "PLUGIN_PROTOCOL_VERSIONS": "1",
}


def interop() -> Any:
    """tools/interop.py as a module (its build and run helpers)."""
    spec = importlib.util.spec_from_file_location("tools_interop", ROOT / "tools" / "interop.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sigterm_exit(work: Path, repeats: int) -> float:
    """Median seconds from SIGTERM to exit of the plugin in go-plugin mode."""
    runs = []
    for _ in range(repeats):
        tmpdir = Path(tempfile.mkdtemp(prefix="tmp-", dir=work))
        proc = subprocess.Popen(
            SERVE,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **GO_PLUGIN_ENV, "TMPDIR": str(tmpdir)},
        )
        assert proc.stdout is not None
        if not select.select([proc.stdout], [], [], 60)[0] or not proc.stdout.readline():
            proc.kill()
            raise SystemExit("the plugin printed no handshake line within 60 s")
        t0 = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        runs.append(time.perf_counter() - t0)
        proc.stdout.close()
    return statistics.median(runs)


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    tools = interop()
    work = Path(tempfile.mkdtemp(prefix="protocol-py-go-kill-"))
    try:
        binary = tools.step_go_plugin_build(work)
        floor = sigterm_exit(work, repeats)
        print(f"SIGTERM to exit (floor): median {floor:.3f} s over {repeats} runs")
        for tls in (False, True):
            for network, serve in (("unix", []), ("tcp", ["--host", "127.0.0.1"])):
                kills = []
                for _ in range(repeats):
                    tmpdir = Path(tempfile.mkdtemp(prefix="tmp-", dir=work))
                    flags = [f"-auto-mtls={str(tls).lower()}"]
                    report = tools.run_go_kernel(binary, tmpdir, flags, serve)
                    if report["exit_code"] != 0 or report["tmpdir_after"]:
                        raise SystemExit(f"not a graceful stop: {report}")
                    kills.append(float(report["kill_seconds"]))
                median = statistics.median(kills)
                runs = " ".join(f"{k:.3f}" for k in kills)
                print(
                    f"Kill, {network}, {'AutoMTLS' if tls else 'plaintext'}: median {median:.3f} s "
                    f"({median / floor:.2f}x the floor; runs {runs})"
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
