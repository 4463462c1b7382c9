"""Ending the processes an abandoned sync tool started, without cgroups.

Linux files a forked child under the thread that forked it (`/proc/PID/task/TID/children`), so the
processes a worker thread started are known without wrapping `subprocess`: whatever a tool ran (through
`subprocess`, `os.system`, `multiprocessing`) is found from the thread that ran the tool, and their own
children from them. Elsewhere (no such files) nothing is found and nothing is killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


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


def kill_thread_children(tid: int) -> list[int]:
    """SIGKILL every process the thread `tid` of this process started, and their descendants; returns their pids.

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
    groups = set()
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group != own_group:
                groups.add(group)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    return found
