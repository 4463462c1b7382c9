"""The signals that stop a CLI run (SIGINT, SIGTERM, SIGHUP), while it runs and once it is over.

While the run goes on, each one cancels it (the run records itself `cancelled`). Once it has finished, they
are ignored (SIG_IGN) until the process exits: the exit code stays the run's, even for a signal that comes
while connections close or spans are flushed at exit. asyncio's `add_signal_handler` cannot do the second
part without a gap: removing its handler resets the signal to its default action first, which ends the
process by the signal (exit code -15), and Python resets its own handlers the same way as it finalizes.
So the handlers are Python ones, woken through a wakeup fd the loop reads, and switching one to SIG_IGN is
a single `sigaction`, with no moment in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopSignals:
    """A context manager for the run's loop: `on_stop(signum)` is called on the loop for each stopping signal
    until `finished()`; from then on they are ignored, for the rest of the process."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_stop: Callable[[int], None]) -> None:
        self.loop = loop
        self.on_stop = on_stop
        self.over = False
        self._old: dict[int, Any] = {}
        self._old_fd = -1
        self._pair: tuple[socket.socket, socket.socket] | None = None

    def __enter__(self) -> StopSignals:
        try:
            pair = socket.socketpair()
            for end in pair:
                end.setblocking(False)
            self._old_fd = signal.set_wakeup_fd(pair[1].fileno(), warn_on_full_buffer=False)
        except (ValueError, OSError):  # not the main thread: the caller stops runs its own way
            return self
        self._pair = pair
        self.loop.add_reader(pair[0].fileno(), self._drain)
        for signum in STOPPING:
            self._old[signum] = signal.signal(signum, self._handle)
        return self

    def _drain(self) -> None:
        """Empty the wakeup fd: waking the loop is what it is for; Python then runs `_handle`."""
        assert self._pair is not None
        with contextlib.suppress(OSError):
            while self._pair[0].recv(4096):
                pass

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.over:
            self.loop.call_soon_threadsafe(self.on_stop, signum)

    def finished(self) -> None:
        """The run is over: stopping signals change nothing from now until the process exits."""
        self.over = True
        for signum in self._old:
            signal.signal(signum, signal.SIG_IGN)

    def __exit__(self, *exc: object) -> None:
        if self._pair is None:
            return
        if not self.over:
            for signum, old in self._old.items():
                signal.signal(signum, old if old is not None else signal.SIG_DFL)
        self.loop.remove_reader(self._pair[0].fileno())
        signal.set_wakeup_fd(self._old_fd)
        for end in self._pair:
            end.close()
        self._pair = None
