"""Ending the processes an abandoned sync tool started, without cgroups.

Two records, because each misses what the other sees. Linux files a forked child under the thread that
forked it (`/proc/PID/task/TID/children`), so whatever a tool ran (through `subprocess`, `os.system`,
`multiprocessing`) is found from the thread that ran the tool, and the children's children from them. A
process whose parent exited (a shell's `(cmd &)`, a daemon's double fork) leaves that tree, though: so
`subprocess.Popen` started on a tool's thread puts its child in a process group of its own (unless the
caller chose its session or group), which the orphans stay in, and the call's groups are killed too.
Elsewhere than Linux the tree is not found, and only the groups are killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_local = threading.local()  # `groups`: the process groups the current tool call's Popen calls made
_popen_init = subprocess.Popen.__init__
_START_NEW_SESSION = 15  # its index among Popen's positional parameters (after `args`)


def _tracked_init(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
    groups: list[int] | None = getattr(_local, "groups", None)
    own = kwargs.get("start_new_session") or kwargs.get("process_group") is not None or len(args) > _START_NEW_SESSION
    if groups is not None and not own:
        kwargs["process_group"] = 0  # a group of its own, named by its pid
    _popen_init(self, *args, **kwargs)
    if groups is not None and (not own or kwargs.get("start_new_session")):
        groups.append(self.pid)


subprocess.Popen.__init__ = _tracked_init  # type: ignore[method-assign]


@contextlib.contextmanager
def tracked() -> Iterator[list[int]]:
    """While a tool call runs on this thread: the process groups its `subprocess` children were put in."""
    groups: list[int] = []
    _local.groups = groups
    try:
        yield groups
    finally:
        _local.groups = None


def _children_of_task(pid: int, tid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{tid}/children").read_text()
    except OSError:  # gone already, or not Linux
        return []
    return [int(word) for word in text.split()]


def _children_of_process(pid: int) -> list[int]:
    try:
        tids = [int(name) for name in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return []
    return [child for tid in tids for child in _children_of_task(pid, tid)]


def kill_thread_children(tid: int, groups: list[int] | None = None) -> list[int]:
    """SIGKILL every process the thread `tid` of this process started, and their descendants, and the process
    groups in `groups` (those `tracked()` recorded); returns the pids found in the tree.

    Each one found is stopped first, so it cannot fork while the tree is walked, and killing a parent does
    not hand its children to init before they are found. A descendant that made its own process group (a
    shell's job, `start_new_session`) has that group killed too, which reaches its orphans.
    """
    found: list[int] = []
    todo = _children_of_task(os.getpid(), tid)
    own_group = os.getpgrp()
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGSTOP)
        found.append(pid)
        todo.extend(_children_of_process(pid))
    doomed = set(groups or ())
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group != own_group:
                doomed.add(group)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for group in doomed - {own_group}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    return found
