"""Sync tools run on daemon worker threads, so the event loop never waits on them unboundedly.

Handing a call to a thread and being woken for its result costs about 90 µs on the loop (a wake-up of
the worker, then of the loop through its self-pipe and selector), 30 to 1,000 times what a small
function takes. So a call may be waited for on the spot, blocking the loop for at most `wait` seconds
(with the GIL released, so the worker runs) before the loop goes back to its other work and is woken
when the result comes. The caller decides who may: `Tool.call` lets a tool that answered quickly last
time, so a slow tool stalls the loop once, by `wait`, and then never again until it is quick again.
Timeouts stay enforceable: the loop is back within `wait`, and a call that runs on is abandoned.

An abandoned call is told so: a thread cannot be killed, so the work it does past its timeout would go on
holding CPU and memory nobody waits for. A tool that does heavy work checks `stop_requested()` (or calls
`check_stop()`) between pieces of it and gives up once its caller stopped waiting (timed out, cancelled).
Its processes end with it (tools/children.py): a timed-out tool that ran `sleep 300` leaves no `sleep`
behind, and nothing keeps shou's exit waiting on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

from .children import kill_thread_children, tracked

__all__ = ["CallAbandoned", "abandoned_calls", "check_stop", "run_in_daemon_thread", "stop_requested",
           "wait_abandoned"]

_LOCAL = threading.local()
_ABANDONED: set[_Call] = set()  # calls whose caller stopped waiting, still running on their thread
_ABANDONED_CHANGED = threading.Condition()


class CallAbandoned(Exception):
    """Raised by `check_stop()` in a sync tool whose caller stopped waiting for it."""


def stop_requested() -> bool:
    """Whether the caller of the sync tool running on this thread stopped waiting for its result."""
    call = getattr(_LOCAL, "call", None)
    return call is not None and call.stopped


def check_stop() -> None:
    """`CallAbandoned` if the caller of the sync tool running on this thread stopped waiting for it."""
    if stop_requested():
        raise CallAbandoned("the call was abandoned (it timed out or was cancelled)")


def abandoned_calls(fn: Callable[..., Any] | None = None) -> int:
    """How many sync calls (of `fn`, if given) whose callers stopped waiting are still running."""
    with _ABANDONED_CHANGED:
        return _count_abandoned(fn)


def wait_abandoned(timeout: float, fn: Callable[..., Any] | None = None) -> bool:
    """Wait up to `timeout` seconds until no abandoned sync call (of `fn`, if given) is running; whether
    none is."""
    with _ABANDONED_CHANGED:
        return _ABANDONED_CHANGED.wait_for(lambda: not _count_abandoned(fn), timeout)


def _count_abandoned(fn: Callable[..., Any] | None) -> int:
    return sum(1 for c in _ABANDONED if fn is None or c.fn is fn)


class _DaemonPool:
    """Reusable daemon worker threads for sync tools.

    A timed-out sync tool cannot be stopped, only abandoned: daemon threads do not keep the process alive
    at exit the way the default executor's would, and reusing them saves starting a thread per call. A
    worker stuck in an abandoned call is replaced by a new one when all are busy.
    """

    def __init__(self, max_idle: int = 8) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], None]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._max_idle = max_idle

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
                start = False
            else:
                start = True
        self._jobs.put((job,))
        if start:
            threading.Thread(target=self._work, daemon=True, name="shou-tool").start()

    def _work(self) -> None:
        while True:
            try:
                (job,) = self._jobs.get(timeout=60)
            except queue.Empty:
                with self._lock:  # idle for a minute: leave, unless a job was handed to us meanwhile
                    if self._idle and self._jobs.empty():
                        self._idle -= 1
                        return
                continue
            job()
            # an idle worker must not keep its last call (its arguments, its result or exception with the
            # frames and context that exception holds) alive until it is handed the next one
            del job
            with self._lock:
                if self._idle >= self._max_idle:
                    return
                self._idle += 1


_POOL = _DaemonPool()


class _Call:
    """One sync call handed to a worker: its outcome, and how the loop learns of it.

    `guard` orders the two ends: the worker records the outcome and reads `future` under it, the loop
    reads the outcome and leaves `future` under it, so a result that comes just as the loop stops waiting
    on the spot is neither lost nor delivered twice.
    """

    __slots__ = ("abandoned", "done", "fn", "future", "groups", "guard", "kwargs", "loop", "outcome", "ran", "stopped",
                 "tid")

    def __init__(self, fn: Callable[..., Any], kwargs: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
        self.fn = fn
        self.kwargs = kwargs
        self.loop = loop
        self.done = threading.Lock()
        self.done.acquire()  # released once the outcome is recorded
        self.guard = threading.Lock()
        self.outcome: tuple[bool, Any] | None = None
        self.future: asyncio.Future[Any] | None = None
        # Set once nobody waits for the outcome any more: a flag the worker reads between pieces of work (an
        # Event, with its Condition and Lock, was a third of what making a call cost, and nobody waits on it).
        self.stopped = False
        self.ran = False  # the function returned or raised (under _ABANDONED_CHANGED)
        self.tid: int | None = None  # the worker's native thread id while it runs the call
        self.groups: list[int] = []  # the process groups its subprocesses were put in (tools/children.py)
        self.abandoned = False

    def run(self) -> None:
        """On the worker: call, record, and wake the loop if it stopped waiting on the spot."""
        with self.guard:
            if self.abandoned:  # given up on before a worker took it: it never runs
                self._finished()
                self.done.release()
                return
            self.tid = threading.get_native_id()
        _LOCAL.call = self
        try:
            with tracked() as self.groups:
                outcome: tuple[bool, Any] = (True, self.fn(**self.kwargs))
        except BaseException as e:
            outcome = (False, e)
        finally:
            _LOCAL.call = None
            self._finished()
        with self.guard:
            self.outcome = outcome
            future = self.future
            tid, self.tid = self.tid, None
            abandoned = self.abandoned
        if abandoned and tid is not None:  # what it started after it was given up on ends too
            kill_thread_children(tid, self.groups)
        self.done.release()
        if future is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed while the tool ran
                self.loop.call_soon_threadsafe(_settle, future, outcome)

    def _finished(self) -> None:
        with _ABANDONED_CHANGED:
            self.ran = True
            if self in _ABANDONED:
                _ABANDONED.discard(self)
                _ABANDONED_CHANGED.notify_all()

    def result(self, wait: float) -> asyncio.Future[Any]:
        """On the loop: the outcome's future, settled already if it came within `wait` seconds."""
        if wait > 0:
            self.done.acquire(timeout=wait)
        future = self.loop.create_future()
        with self.guard:
            outcome = self.outcome
            if outcome is None:
                self.future = future  # the worker settles it through the loop
                future.add_done_callback(self._abandon)
                return future
        _settle(future, outcome)
        return future

    def _abandon(self, future: asyncio.Future[Any]) -> None:
        """The caller gave up (a timeout, a stopped run): the call is abandoned and told to stop, and the
        processes it started are killed, since a thread cannot be stopped but its children can."""
        if not future.cancelled():
            return
        with _ABANDONED_CHANGED:
            if not self.ran:
                _ABANDONED.add(self)
        self.stopped = True
        with self.guard:  # held while killing: the worker cannot move on to another call's processes meanwhile
            if self.outcome is not None:
                return
            self.abandoned = True
            if self.tid is not None:
                kill_thread_children(self.tid, self.groups)


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if not future.done():
        ok, value = outcome
        future.set_result(value) if ok else future.set_exception(value)


def run_in_daemon_thread(fn: Callable[..., Any], kwargs: dict[str, Any], wait: float = 0.0) -> asyncio.Future[Any]:
    """Run a sync function on a daemon worker thread; await the returned future for its result. With
    `wait`, the loop first blocks up to that many seconds for it (see the module's docstring)."""
    call = _Call(fn, kwargs, asyncio.get_running_loop())
    _POOL.submit(call.run)
    return call.result(wait)
