"""Stop signals of ``groundplan serve``: SIGINT (Ctrl-C) and SIGTERM (what systemd, Docker and
Kubernetes send) are recorded, never raised, and the server's own wait loop notices them and shuts
Serve and Ray down in order, then exits with the usual status (128 + the signal's number).

Why recorded rather than raised: a Python signal handler runs wherever the main thread happens to be,
and inside Ray that is often its C extension (a ``ray.get`` polls for signals); an exception raised
there surfaces as a ``KeyboardInterrupt`` traceback from Serve's deploy wait or as a ``SystemError``.
Why installed again after ``ray.init``: Ray replaces the driver's SIGTERM handler with one that calls
``sys.exit(15)``, and its core worker then installs a native one that prints a stack dump and aborts.
Why Ray's processes get a session of their own (:func:`ray_processes_in_own_session`): a signal sent to
the server's process group (``kill -TERM -PGID``, Ctrl-C) would otherwise stop the raylet too, and the
driver's core worker, seeing its raylet gone, ends the process with status 1 before the recorded signal
is handled: a race the server would lose about one time in three on a loaded machine.
"""
from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from types import FrameType
from typing import Any, Callable, Iterator

log = logging.getLogger(__name__)

#: the signals that stop the server
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """Which stop signal arrived first (``received``), and a wait that returns when one does.

    The handler only assigns an attribute: it may run between any two bytecodes of the main thread,
    including inside a lock that the main thread holds, so it takes no lock and does no logging."""

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        self.repeats = 0  # stop signals after the first (they do not interrupt the shutdown)
        self._previous: dict[signal.Signals, Any] = {}

    def install(self) -> bool:
        """Handle SIGINT and SIGTERM from now on (again after anything that replaced the handlers, such
        as ``ray.init``). False, changing nothing, outside the main thread (Python allows it only there)."""
        if threading.current_thread() is not threading.main_thread():
            log.warning("not in the main thread: SIGINT and SIGTERM keep their current handlers")
            return False
        for sig in STOP_SIGNALS:
            previous = signal.signal(sig, self._handle)
            self._previous.setdefault(sig, previous)
        return True

    def uninstall(self) -> None:
        """Put back the handlers found by the first :meth:`install` (the default for one that Python
        did not install)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signal.Signals(signum)
        else:
            self.repeats += 1

    def record(self, signum: int) -> None:
        """Note a stop signal that reached another handler (Ray's, during ``ray.init``)."""
        self._handle(signum, None)

    def wait(self, until: Callable[[], bool] = lambda: False, poll_s: float = 0.25) -> bool:
        """Block until a stop signal arrives (True) or ``until()`` holds (False), checking both every
        ``poll_s`` seconds."""
        while self.received is None:
            if until():
                return False
            time.sleep(poll_s)
        return True

    @property
    def exit_status(self) -> int:
        """128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as a shell reports it; 0 if none."""
        return 0 if self.received is None else 128 + int(self.received)


@contextlib.contextmanager
def ray_processes_in_own_session() -> Iterator[bool]:
    """While open, the processes that Ray starts (GCS, raylet, dashboard, log monitor; the raylet's
    workers inherit it) begin a session of their own, outside the caller's process group, so a stop
    signal sent to that group reaches only the server, which then shuts Ray down in order.

    Ray offers no option for this; its processes are started through one ``Popen`` subclass
    (``ray._private.services.ConsolePopen``), which is swapped for one that adds
    ``start_new_session=True`` and put back on exit. Yields whether that was possible: with a Ray
    that lacks the class, nothing changes and the race described above remains. Ray's own fate
    sharing (its processes die with the driver that started them) does not depend on the session."""
    try:
        from ray._private import services
        base = services.ConsolePopen
    except (ImportError, AttributeError):
        log.warning("this Ray version starts its processes differently: they stay in the server's process group")
        yield False
        return

    class _OwnSessionPopen(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("start_new_session", True)
            super().__init__(*args, **kwargs)

    services.ConsolePopen = _OwnSessionPopen
    try:
        yield True
    finally:
        services.ConsolePopen = base
