"""Stop when the launching kernel dies, whatever the plugin's stdin is (docs/handshake.md).

:func:`protocol_py.server.serve.watch_stdin_eof` notices a dead kernel by the end of file of
a stdin pipe only :func:`protocol_py.transport.launch.launch` gives its plugin; hashicorp/
go-plugin hands its plugin the kernel's own stdin (a terminal, ``/dev/null``, a CI runner's
pipe), whose end says nothing about the kernel. :func:`watch_parent` watches the parent
process itself:

* **every POSIX platform** (Linux, macOS, the BSDs): ``getppid()`` is polled every
  :data:`PARENT_POLL_INTERVAL` seconds; once it differs from the parent recorded when the
  plugin started, the plugin has been re-parented (to init or a subreaper): the kernel is
  gone.
* **Linux**, in addition: ``prctl(PR_SET_PDEATHSIG, PARENT_DEATH_SIGNAL)`` (through
  :mod:`ctypes`) makes the kernel deliver :data:`PARENT_DEATH_SIGNAL` the moment the parent
  goes, so the plugin reacts at once instead of at the next poll. Linux sends it when the
  *thread* that started the plugin exits, which a live kernel may do (a Go runtime thread, a
  Python worker thread); the handler therefore acts only when ``getppid()`` changed, and a
  false alarm is ignored. The signal is set from the plugin itself, never by a
  ``preexec_fn`` in the kernel.

Windows is not covered (the plugin serves unix sockets and POSIX signals). A kernel that dies
while the plugin's interpreter is still starting (before :func:`watch_parent` records the
parent) is not noticed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Final

log = logging.getLogger("protocol_py.server")

PARENT_POLL_INTERVAL: Final = 0.5
"""Seconds between two ``getppid()`` checks: the longest a dead kernel goes unnoticed where
:data:`PARENT_DEATH_SIGNAL` is not available."""

PARENT_DEATH_SIGNAL: Final = signal.SIGUSR2
"""The signal Linux sends the plugin when its parent thread exits (``PR_SET_PDEATHSIG``);
while the watch runs, a SIGUSR2 from anyone only triggers a ``getppid()`` check."""

PR_SET_PDEATHSIG: Final = 1
"""``prctl`` option number (``<linux/prctl.h>``)."""


def _set_parent_death_signal(signum: int) -> bool:
    """``prctl(PR_SET_PDEATHSIG, signum)`` on Linux; True when it took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return int(prctl(PR_SET_PDEATHSIG, signum, 0, 0)) == 0


class ParentWatch:
    """A running :func:`watch_parent`; :meth:`close` stops it.

    Attributes:
        parent: The parent's pid recorded at start.
        method: How the death is noticed, in words (logged at start).
    """

    def __init__(
        self,
        on_death: Callable[[], None],
        parent: int,
        loop: asyncio.AbstractEventLoop,
        use_signal: bool,
    ) -> None:
        self.parent = parent
        self._on_death: Callable[[], None] | None = on_death
        self._loop = loop
        self._timer: asyncio.TimerHandle | None = None
        self._signal = False
        if use_signal and _set_parent_death_signal(PARENT_DEATH_SIGNAL):
            loop.add_signal_handler(PARENT_DEATH_SIGNAL, self._on_signal)
            self._signal = True
        self.method = (
            f"prctl(PR_SET_PDEATHSIG, {PARENT_DEATH_SIGNAL.name}) and a getppid() poll every "
            f"{PARENT_POLL_INTERVAL:g} s"
            if self._signal
            else f"a getppid() poll every {PARENT_POLL_INTERVAL:g} s"
        )
        self.check()  # the parent may be gone already

    @property
    def active(self) -> bool:
        """False once the death was reported or :meth:`close` was called."""
        return self._on_death is not None

    def check(self) -> None:
        """Report the death when ``getppid()`` is no longer the recorded parent; otherwise
        check again in :data:`PARENT_POLL_INTERVAL` seconds."""
        if self._on_death is None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if os.getppid() == self.parent:
            self._timer = self._loop.call_later(PARENT_POLL_INTERVAL, self.check)
            return
        on_death, self._on_death = self._on_death, None
        log.info("the launching kernel (pid %d) is gone; shutting down", self.parent)
        self._stop_signal()
        on_death()

    def _on_signal(self) -> None:
        self.check()
        if self._on_death is not None:
            log.info(
                "%s with the launching kernel (pid %d) alive (the thread that started this "
                "plugin exited, or another sender): ignored",
                PARENT_DEATH_SIGNAL.name,
                self.parent,
            )

    def close(self) -> None:
        """Stop watching (idempotent): the timer is cancelled, the parent-death signal reset."""
        self._on_death = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._stop_signal()

    def _stop_signal(self) -> None:
        if self._signal:
            self._signal = False
            _set_parent_death_signal(0)
            with contextlib.suppress(Exception):
                self._loop.remove_signal_handler(PARENT_DEATH_SIGNAL)


def watch_parent(
    on_death: Callable[[], None], *, parent: int | None = None, use_signal: bool = True
) -> ParentWatch:
    """Call ``on_death`` once when the parent process ``parent`` (default: the current one)
    is gone (see the module docstring). Call it on the running event loop.

    Args:
        on_death: What to do then (:func:`~protocol_py.server.serve.serve_async` drains, as
            on SIGTERM); called on the event loop, must not block.
        parent: The parent's pid as recorded earlier.
        use_signal: Also use Linux's ``PR_SET_PDEATHSIG`` (needs the main thread: the signal
            handler is the event loop's).
    """
    return ParentWatch(
        on_death, os.getppid() if parent is None else parent, asyncio.get_running_loop(), use_signal
    )


__all__ = [
    "PARENT_DEATH_SIGNAL",
    "PARENT_POLL_INTERVAL",
    "PR_SET_PDEATHSIG",
    "ParentWatch",
    "watch_parent",
]
