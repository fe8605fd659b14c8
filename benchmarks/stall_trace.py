"""Stall attribution for ``loop_stall.py --trace-stalls``: which line holds the interpreter
while the event loop cannot run.

A Python watchdog thread cannot see a C call that holds the GIL (it needs the GIL itself to
run), so the sampling is done by :mod:`faulthandler`'s C watchdog thread, which dumps the
Python frames of every thread without taking the GIL. The loop's probe calls :meth:`tick` on
every wake-up: it re-arms the watchdog (``dump_traceback_later(SAMPLE_S, repeat=True)``), so
dumps appear only while the loop has not ticked for :data:`SAMPLE_S` and then every
:data:`SAMPLE_S` until it ticks again; the tick that ends such a stall writes a ``### gap``
marker with the stall's length after the dumps it explains. :func:`summarize` groups the
dumps by stall and prints, for each stall longer than a threshold, every thread's top frames
per sample: the thread whose top line stays the same through a stall, outside
``selectors.py``'s poll (the loop waiting for the GIL), is the one holding it.
"""

from __future__ import annotations

import collections
import faulthandler
import os
import re
import threading
import time
from typing import Any, Final, TextIO

SAMPLE_S: Final = 0.01
"""Interval between two dumps of all threads' frames while the loop has not ticked, seconds."""

FRAMES: Final = 4
"""Innermost frames of each thread printed per sample."""


class StallTracer:
    """Arms :mod:`faulthandler`'s watchdog from the loop (see the module)."""

    def __init__(self, path: str) -> None:
        self.handle: TextIO = open(path, "w")  # noqa: SIM115 - lives as long as the process
        self.fd = self.handle.fileno()
        self.size = 0
        self.last = time.perf_counter()
        os.write(self.fd, f"### loop thread 0x{threading.get_ident():016x}\n".encode())
        self.size = os.fstat(self.fd).st_size

    def tick(self) -> None:
        """The loop ran: label the dumps of the stall that just ended and re-arm."""
        now = time.perf_counter()
        size = os.fstat(self.fd).st_size
        if size != self.size:
            os.write(self.fd, f"### gap {(now - self.last) * 1000:.1f} ms\n".encode())
            self.size = os.fstat(self.fd).st_size
        self.last = now
        faulthandler.dump_traceback_later(SAMPLE_S, repeat=True, file=self.handle)


_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+)")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (\S+)')
_GAP = re.compile(r"^### gap ([\d.]+) ms")
_LOOP = re.compile(r"^### loop thread (0x[0-9a-f]+)")


def _short(path: str) -> str:
    for marker in ("site-packages/", "src/", "lib/python3"):
        if marker in path:
            return path.split(marker, 1)[1]
    return os.path.basename(path)


def summarize(path: str, threshold_ms: float, out: TextIO) -> None:
    """Print each stall of ``path`` longer than ``threshold_ms``: per sample, every thread's
    innermost :data:`FRAMES` frames; then the top lines counted over all such stalls."""
    samples: list[dict[str, list[str]]] = []
    current: dict[str, list[str]] | None = None
    thread = loop = ""
    tally: collections.Counter[str] = collections.Counter()
    with open(path) as handle:
        for line in handle:
            named = _LOOP.match(line)
            if named is not None:
                loop = named.group(1)
                continue
            if line.startswith("Timeout ("):
                current = {}
                samples.append(current)
                continue
            gap = _GAP.match(line)
            if gap is not None:
                ms = float(gap.group(1))
                if ms > threshold_ms and samples:
                    print(f"stall {ms:.1f} ms, {len(samples)} samples:", file=out)
                    for i, sample in enumerate(samples):
                        print(f"  sample {i + 1} ({(i + 1) * SAMPLE_S * 1000:.0f} ms)", file=out)
                        for name, frames in sample.items():
                            print(f"    {name}: " + " <- ".join(frames[:FRAMES]), file=out)
                            if frames:
                                tally[f"{name.split()[0]} {frames[0]}"] += 1
                samples, current = [], None
                continue
            head = _THREAD.match(line)
            if head is not None and current is not None:
                thread = "loop" if head.group(1) == loop else "worker " + head.group(1)[-6:]
                current[thread] = []
                continue
            frame = _FRAME.match(line)
            if frame is not None and current is not None and thread in current:
                current[thread].append(
                    f"{_short(frame.group(1))}:{frame.group(2)} {frame.group(3)}"
                )
    print(
        f"top lines over the stalls > {threshold_ms:g} ms (samples of {SAMPLE_S * 1000:g} ms):",
        file=out,
    )
    for where, count in tally.most_common(20):
        print(f"  {count:4d}  {where}", file=out)


GC_REPORT_MS: Final = 2.0
"""Garbage collections at least this long are reported by :func:`trace_gc`, milliseconds."""


def trace_gc(out: TextIO) -> None:
    """Report every cyclic garbage collection of at least :data:`GC_REPORT_MS` to ``out``
    (generation, duration, objects collected, the thread that ran it): Python-level, so it
    cannot crash the process the way :class:`StallTracer`'s dumps occasionally do."""
    import gc  # noqa: PLC0415 - only when tracing

    started: dict[int, float] = {}

    def callback(phase: str, info: dict[str, int]) -> None:
        ident = threading.get_ident()
        if phase == "start":
            started[ident] = time.perf_counter()
            return
        took = (time.perf_counter() - started.pop(ident, time.perf_counter())) * 1000
        if took >= GC_REPORT_MS:
            name = threading.current_thread().name
            print(
                f"### gc generation {info['generation']} {took:.1f} ms, "
                f"{info['collected']} collected, in {name}",
                file=out,
                flush=True,
            )

    gc.callbacks.append(callback)


PY_SAMPLE_S: Final = 0.002
"""Interval between two samples of :class:`PySampler`, seconds."""


class PySampler:
    """A Python thread sampling every thread's innermost frames every :data:`PY_SAMPLE_S`
    (``sys._current_frames``), and :meth:`tick`, called by the loop's probe, printing the
    samples taken during a gap longer than ``threshold_ms``. It runs only when it gets the
    interpreter, so it sees stalls of pure-Python work (in the loop or a worker), not a single
    long C call (see :class:`StallTracer` for those); it cannot crash the process."""

    def __init__(self, out: TextIO, threshold_ms: float) -> None:
        import collections as _collections  # noqa: PLC0415
        import sys as _sys  # noqa: PLC0415

        self.out = out
        self.threshold = threshold_ms / 1000
        self.samples: _collections.deque[tuple[float, list[str]]] = _collections.deque(
            maxlen=20_000
        )
        self.loop = threading.get_ident()
        self.last = time.perf_counter()
        self._frames = _sys._current_frames
        threading.Thread(target=self._run, name="stall-sampler", daemon=True).start()

    def _describe(self, ident: int, frame: Any) -> str:
        names = {t.ident: t.name for t in threading.enumerate()}
        who = "loop" if ident == self.loop else names.get(ident, str(ident))
        parts: list[str] = []
        while frame is not None and len(parts) < FRAMES:
            code = frame.f_code
            parts.append(f"{_short(code.co_filename)}:{frame.f_lineno} {code.co_name}")
            frame = frame.f_back
        return f"{who}: " + " <- ".join(parts)

    def _run(self) -> None:
        me = threading.get_ident()
        while True:
            time.sleep(PY_SAMPLE_S)
            now = time.perf_counter()
            frames = self._frames()
            self.samples.append((now, [self._describe(i, f) for i, f in frames.items() if i != me]))

    def tick(self) -> None:
        """The loop ran: print the samples of the gap that just ended if it was long."""
        now = time.perf_counter()
        if now - self.last > self.threshold:
            inside = []
            for sample in reversed(self.samples):  # newest first, back to the gap's start
                if sample[0] < self.last:
                    break
                inside.append(sample)
            inside.reverse()
            print(
                f"### gap {(now - self.last) * 1000:.1f} ms, {len(inside)} samples", file=self.out
            )
            for at, lines in inside:
                print(f"  +{(at - self.last) * 1000:.1f} ms", file=self.out)
                for line in lines:
                    if "_feed" not in line:
                        print(f"    {line}", file=self.out)
            self.out.flush()
        self.last = now
