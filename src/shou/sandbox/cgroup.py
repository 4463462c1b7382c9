"""A per-run cgroup for memory and process limits, where this process may create one.

rlimits are per process (RLIMIT_DATA) or per user (RLIMIT_NPROC); a cgroup bounds the whole tree and
tells an OOM kill apart from other deaths. It is a bonus: where no cgroup is writable (most laptops
without delegation), the rlimits still hold. Both cgroup v1 (memory, pids controllers) and v2 work.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def _own_path(controller: str) -> str | None:
    """This process's cgroup path for `controller` (v1) or the unified one (v2, controller "")."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller and controller in controllers.split(","):
            return path
        if not controller and controllers == "":
            return path
    return None


class RunCgroup:
    """One cgroup (v1: one per controller) holding a run's processes; remove it after the run."""

    def __init__(self, dirs: dict[str, Path], version: int) -> None:
        self.dirs = dirs
        self.version = version

    @classmethod
    def create(cls, memory_bytes: int, max_pids: int) -> RunCgroup | None:
        """A new cgroup with these limits, or None when no cgroup can be made here."""
        name = f"shou-{os.getpid()}-{secrets.token_hex(4)}"
        made: dict[str, Path] = {}
        try:
            if (ROOT / "memory").is_dir():  # v1
                for controller, files in (("memory", {"memory.limit_in_bytes": memory_bytes,
                                                      "memory.memsw.limit_in_bytes": memory_bytes}),
                                          ("pids", {"pids.max": max_pids})):
                    parent = _own_path(controller)
                    if parent is None:
                        continue
                    d = ROOT / controller / parent.lstrip("/") / name
                    d.mkdir()
                    made[controller] = d
                    for fname, value in files.items():
                        with contextlib.suppress(OSError):  # memsw exists only with swap accounting
                            (d / fname).write_text(str(value))
                return cls(made, 1) if "memory" in made else _cleanup(made)
            parent = _own_path("")
            if parent is None:
                return None
            d = ROOT / parent.lstrip("/") / name
            d.mkdir()
            made["unified"] = d
            (d / "memory.max").write_text(str(memory_bytes))
            (d / "memory.swap.max").write_text("0")
            (d / "pids.max").write_text(str(max_pids))
            return cls(made, 2)
        except OSError:
            return _cleanup(made)

    def add(self, pid: int) -> None:
        """Move `pid` in (its later children follow it)."""
        for d in self.dirs.values():
            with contextlib.suppress(OSError):
                (d / "cgroup.procs").write_text(str(pid))

    def oom_killed(self) -> bool:
        """Whether the kernel killed something in here for lack of memory."""
        try:
            if self.version == 1:
                text = (self.dirs["memory"] / "memory.oom_control").read_text()
            else:
                text = (self.dirs["unified"] / "memory.events").read_text()
        except (OSError, KeyError):
            return False
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip() not in ("", "0"):
                return True
        return False

    def pids(self) -> list[int]:
        """The processes still in the cgroup."""
        found: set[int] = set()
        for d in self.dirs.values():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        return sorted(found)

    def kill_all(self) -> None:
        """SIGKILL every process left inside."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, 9)

    def remove(self) -> None:
        """Kill what is left and delete the cgroup."""
        self.kill_all()
        for d in self.dirs.values():
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # processes still exiting
                    import time

                    time.sleep(0.01)


def _cleanup(made: dict[str, Path]) -> None:
    for d in made.values():
        with contextlib.suppress(OSError):
            d.rmdir()
    return None
