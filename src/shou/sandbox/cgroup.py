"""A per-run cgroup for memory and process limits, where this process may create one.

rlimits are per process (RLIMIT_DATA) or per user (RLIMIT_NPROC); a cgroup bounds the whole tree, tmpfs
pages it writes (/tmp, /dev/shm) included, and tells an OOM kill apart from other deaths. The sandbox joins
it before its first instruction (`BubblewrapSandbox.command`), so no child starts outside it. Where no
cgroup is writable (most laptops without delegation), the rlimits still hold. Both cgroup v1 (memory, pids
controllers) and v2 work.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import threading
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
_FREEZE_POLLS = 1000  # half-millisecond looks for the kernel to report a freeze or a thaw done
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
                if "memory" in made and (parent := _own_path("freezer")) is not None and (ROOT / "freezer").is_dir():
                    with contextlib.suppress(OSError):  # without it, a pause falls back to signals alone
                        made["freezer"] = ROOT / "freezer" / parent.lstrip("/") / name
                        made["freezer"].mkdir()
                    if not made["freezer"].is_dir():
                        del made["freezer"]
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

    def join(self, pids: list[int]) -> None:
        """Move these processes (each with all its threads) into the cgroup; OSError if the kernel refuses."""
        for procs in self.procs_files():
            for pid in pids:
                with open(procs, "w") as f:  # one pid per write: the kernel takes one per write(2)
                    f.write(str(pid))

    def oom_killed(self) -> bool:
        """Whether the kernel killed something in here for lack of memory."""
        return self.oom_kills() > 0

    def oom_kills(self) -> int:
        """How many processes the kernel killed in here for lack of memory."""
        try:
            if self.version == 1:
                text = (self.dirs["memory"] / "memory.oom_control").read_text()
            else:
                text = (self.dirs["unified"] / "memory.events").read_text()
        except (OSError, KeyError):
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def pids(self) -> list[int]:
        """The processes still in the cgroup."""
        found: set[int] = set()
        for d in self.dirs.values():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        return sorted(found)

    def can_freeze(self) -> bool:
        """Whether `freeze` works here (v2, or v1 with the freezer controller)."""
        return self.version == 2 or "freezer" in self.dirs

    def freeze(self, frozen: bool) -> bool:
        """Freeze (or thaw) every process inside at once; whether it is so now. Kept frozen only for a
        moment (`Started.pause`): a task frozen by v1's freezer ignores SIGKILL until thawed, so one left frozen
        would outlive a killed shou (`sweep_stale` thaws what a dead shou left)."""
        try:
            if self.version == 2:
                (self.dirs["unified"] / "cgroup.freeze").write_text("1" if frozen else "0")
                for _ in range(_FREEZE_POLLS):
                    if f"frozen {int(frozen)}" in (self.dirs["unified"] / "cgroup.events").read_text():
                        return True
                    time.sleep(0.0005)
                return False
            state = self.dirs["freezer"] / "freezer.state"
            state.write_text("FROZEN" if frozen else "THAWED")
            for _ in range(_FREEZE_POLLS):
                if state.read_text().strip() == ("FROZEN" if frozen else "THAWED"):
                    return True
                time.sleep(0.0005)
        except (OSError, KeyError):
            pass
        return False

    def kill_all(self) -> None:
        """SIGKILL every process left inside."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, 9)

    def remove(self) -> None:
        """Kill what is left and delete the cgroup (in the background while killed processes still exit)."""
        self.kill_all()
        if self.can_freeze():
            self.freeze(False)  # a frozen v1 task dies of its SIGKILL only once thawed
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
                    for state in (Path(entry.path) / "freezer.state", Path(entry.path) / "cgroup.freeze"):
                        with contextlib.suppress(OSError):  # a frozen task dies of its pending SIGKILL once thawed
                            state.write_text("THAWED" if state.name == "freezer.state" else "0")
                    _rmdir(Path(entry.path))


def _parents() -> list[Path]:
    if (ROOT / "memory").is_dir():
        return [ROOT / c / p.lstrip("/") for c in ("memory", "pids", "freezer") if (p := _own_path(c)) is not None]
    own = _own_path("")
    return [ROOT / own.lstrip("/")] if own is not None else []


def _cleanup(made: dict[str, Path]) -> None:
    for d in made.values():
        with contextlib.suppress(OSError):
            d.rmdir()
    return None


class CgroupHold:
    """Moves a bubblewrap sandbox into its run's cgroup before its program starts, without an exec for it.

    bwrap writes its child's pid to `--info-fd` and holds that child on `--block-fd` until a byte arrives;
    `release` moves bwrap and its child into the cgroup, then lets the child go. `child_fds` are the ends
    the spawned process inherits; `close()` closes every end still open.
    """

    def __init__(self, cgroup: RunCgroup) -> None:
        self.cgroup = cgroup
        self._info_r, info_w = os.pipe()
        block_r, self._block_w = os.pipe()
        self.child_fds = (info_w, block_r)
        self._open = [self._info_r, info_w, block_r, self._block_w]

    def _close_fd(self, fd: int) -> None:
        if fd in self._open:
            self._open.remove(fd)
            with contextlib.suppress(OSError):
                os.close(fd)

    async def release(self, pid: int) -> None:
        """Move `pid` (bwrap) and its child into the cgroup and unblock the child. If that cannot be done,
        bwrap is killed (its child dies with it: --die-with-parent) before the child is let go."""
        for fd in self.child_fds:  # ours closed: bwrap's exit ends the read below
            self._close_fd(fd)
        info = await _read_info(self._info_r)
        try:
            child = int(json.loads(info)["child-pid"])
            self.cgroup.join([pid, child])
        except (OSError, ValueError, KeyError, TypeError):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, 9)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, 9)
            return
        finally:
            self._close_fd(self._info_r)
        with contextlib.suppress(OSError):
            os.write(self._block_w, b"x")
        self._close_fd(self._block_w)

    def close(self) -> None:
        """Close the pipe ends still open."""
        for fd in list(self._open):
            self._close_fd(fd)


async def _read_info(fd: int, limit: int = 65536) -> bytes:
    """What bwrap wrote on its info fd: one JSON object (read until it closes or the object is complete)."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    data = bytearray()
    while b"}" not in data and len(data) < limit:
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, lambda f=ready: f.done() or f.set_result(None))
        try:
            await ready
        finally:
            loop.remove_reader(fd)
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            continue
        if not chunk:
            break
        data += chunk
    return bytes(data)
