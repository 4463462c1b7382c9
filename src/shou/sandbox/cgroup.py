"""A per-run cgroup for memory and process limits, where this process may create one.

rlimits are per process (RLIMIT_DATA) or per user (RLIMIT_NPROC); a cgroup bounds the whole tree, tmpfs
pages it writes (/tmp, /dev/shm) included, and tells an OOM kill apart from other deaths. The sandbox joins
it before its first instruction (`BubblewrapSandbox.command`), so no child starts outside it. Where no
cgroup is writable (most laptops without delegation), the rlimits still hold. Both cgroup v1 (memory, pids
controllers) and v2 work.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
_swept = False


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
        global _swept
        if not _swept:
            _swept = True
            sweep_stale()
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

    def procs_files(self) -> list[str]:
        """The `cgroup.procs` files a process writes its pid to, to join (its children follow it)."""
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

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
        """Kill what is left and delete the cgroup (in the background while killed processes still exit)."""
        self.kill_all()
        left = [d for d in self.dirs.values() if not _rmdir(d)]
        if left:  # never block the caller's event loop waiting for the kernel to finish exits
            threading.Thread(target=_remove_later, args=(left,), daemon=True, name="shou-cgroup-rm").start()


def _rmdir(d: Path) -> bool:
    try:
        d.rmdir()
    except FileNotFoundError:
        pass
    except OSError:  # EBUSY: processes still exiting
        return False
    return True


def _remove_later(dirs: list[Path], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while dirs and time.monotonic() < deadline:
        time.sleep(0.05)
        dirs = [d for d in dirs if not _rmdir(d)]


def sweep_stale() -> None:
    """Remove empty run cgroups left by shou processes that died (kill -9) before removing them."""
    for parent in _parents():
        with contextlib.suppress(OSError):
            for entry in os.scandir(parent):
                bits = entry.name.split("-")
                if len(bits) == 3 and bits[0] == "shou" and bits[1].isdigit() and int(bits[1]) != os.getpid() \
                        and not os.path.exists(f"/proc/{bits[1]}"):
                    _rmdir(Path(entry.path))


def _parents() -> list[Path]:
    if (ROOT / "memory").is_dir():
        return [ROOT / c / p.lstrip("/") for c in ("memory", "pids") if (p := _own_path(c)) is not None]
    own = _own_path("")
    return [ROOT / own.lstrip("/")] if own is not None else []


def _cleanup(made: dict[str, Path]) -> None:
    for d in made.values():
        with contextlib.suppress(OSError):
            d.rmdir()
    return None
