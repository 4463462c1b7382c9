"""A warm Docker sandbox: one long-lived container per sandbox, whose resident executor runs each call.

`docker run` per call costs about 100 ms (create, start, wait, logs, remove); a call to a resident
executor (`warm_executor.py`) over a unix socket costs a fork and an exec. The container is made as the
per-call one is (same limits, binds, seccomp profile, uid, no network, read-only root) and started on the
sandbox's first call. Each call still starts in a fresh session with its own rlimits and time limit; when
its first process ends (or it is killed) every other process in the container is killed and /tmp,
/dev/shm, /dev/mqueue and System V IPC are emptied, so nothing of one call is left to the next but what
it wrote to the workspace, as before.

The container is replaced when it dies, when the workspace's protected paths change (a new repository,
a `shou.toml` that appeared: the binds are fixed when a container is made) and when the event loop
changes; it is removed by `close()`, at interpreter exit, and by the engine when shou dies (the executor
exits when its connection closes, and the container is made with auto-remove).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import UserError
from ..git_protect import Protected, remove_planted
from .base import ExecResult, ExitReason, Limits, OutputCapture, new_output_path
from .docker_binds import PinnedBinds
from .docker_engine import create, discard, start
from .docker_result import docker_result
from .quota import DiskAllowance, DiskWatch
from .warm_link import KILL_GRACE, ExecutorLink, LinkBroken, executor_argv, rlimits

SOCKET_DIR = "/run/shou"
CONNECT_TIMEOUT = 30.0  # the executor connects as soon as python3 starts in the container
_LIVE: set[WarmContainer] = set()  # warm containers to remove at interpreter exit
_LIVE_LOCK = threading.Lock()


class WarmFailed(Exception):
    """The warm container could not be made or answered wrongly: use a container per call instead."""


class WarmContainer:
    """A started container with its executor connected; one call at a time (`busy`)."""

    def __init__(self, container: Any, link: ExecutorLink, code_dir: Path, sock_dir: Path, binds: PinnedBinds,
                 key: tuple[Any, ...]) -> None:
        self.container = container
        self.code_dir = code_dir
        self.sock_dir = sock_dir
        self.binds = binds
        self.key = key  # what it was made for: image, container-wide limits, protected paths, event loop
        self.oom_file = _oom_file(container.id)
        self.link = link
        link.ooms = self._ooms

    @property
    def busy(self) -> bool:
        """A call is running in it."""
        return self.link.busy

    @property
    def dead(self) -> bool:
        """It stopped answering: replace it."""
        return self.link.dead

    @classmethod
    async def start(cls, client: Any, config: dict[str, Any], binds: PinnedBinds, key: tuple[Any, ...],
                    uid: int) -> WarmContainer:
        """Make and start the container of `config` (its command is replaced by the executor) and wait
        for the executor to connect. Raises WarmFailed (having removed what it made) when that fails."""
        _sweep_stale()
        sock_dir = Path(tempfile.mkdtemp(prefix=f"shou-warm-{os.getpid()}-"))
        code_dir = Path(tempfile.mkdtemp(prefix=f"shou-warm-code-{os.getpid()}-"))
        os.chmod(code_dir, 0o755)
        container = None
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            path = sock_dir / "s"
            server.bind(str(path))
            server.listen(1)
            server.setblocking(False)
            if os.geteuid() == 0:  # only root and the executor's uid may enter
                os.chown(sock_dir, uid, uid)
            path.chmod(0o666)
            config = _warm_config(config, sock_dir, code_dir)
            container = await create(client, config)
            await start(container)
            loop = asyncio.get_running_loop()
            async with asyncio.timeout(CONNECT_TIMEOUT):
                conn, _ = await loop.sock_accept(server)
            server.close()
            path.unlink()  # nothing else can connect now
            _check_peer(conn, container.id)
            reader, writer = await asyncio.open_unix_connection(sock=conn, limit=2**20)
            link = ExecutorLink(reader, writer, lambda: -1)
            await link.hello()
        except BaseException as exc:
            server.close()
            if container is not None:
                await asyncio.shield(asyncio.to_thread(discard, container))
            binds.close()
            shutil.rmtree(sock_dir, ignore_errors=True)
            shutil.rmtree(code_dir, ignore_errors=True)
            if isinstance(exc, (TimeoutError, OSError, asyncio.IncompleteReadError, LinkBroken)):
                raise WarmFailed(str(exc) or type(exc).__name__) from exc
            raise
        warm = cls(container, link, code_dir, sock_dir, binds, key)
        with _LIVE_LOCK:
            _LIVE.add(warm)
        return warm

    async def run(self, workspace: Path, protected: Protected, argv: list[str], stdin: bytes | None, limits: Limits,
                  files: dict[str, bytes], allowance: DiskAllowance) -> ExecResult:
        """Run one call as a per-call container would: the same capture, spill files, allowance and notes."""
        disk = allowance.watch(workspace, limits.disk_mb * 2**20, limits.inodes)
        out = OutputCapture(spill_path=new_output_path(workspace, "docker"), budget=disk.room)
        err = OutputCapture(spill_path=new_output_path(workspace, "docker-stderr"), budget=disk.room)
        started = time.monotonic()
        try:
            exit_code, reason, oom = await self.call(argv, stdin, files, limits, disk, out, err)
        finally:
            out.close()
            err.close()
            allowance.charge(disk)
        result = docker_result(out, err, exit_code, reason, oom, time.monotonic() - started, limits, disk, workspace)
        planted = remove_planted(workspace, protected)
        return replace(result, note="; ".join(x for x in (result.note, planted) if x)) if planted else result

    async def call(self, argv: list[str], stdin: bytes | None, files: dict[str, bytes], limits: Limits,
                   disk: DiskWatch, out: OutputCapture, err: OutputCapture) -> tuple[int | None, ExitReason, bool]:
        """Run one command (see `ExecutorLink.call`); its files go in through the code folder's bind."""
        stdin_name = _write_code(self.code_dir, files, stdin)
        request = {"argv": argv, "rlimits": rlimits(limits), "stdin": stdin_name}
        self.link.busy = True
        try:
            return await self.link.call(request, limits, disk, out, err)
        finally:
            self.link.busy = False

    def _ooms(self) -> int:
        """How many times the container's memory cgroup killed for memory (read on the host: the program
        cannot forge it). -1 when the engine's cgroup is not where it is looked for."""
        if self.oom_file is None:
            return -1
        with contextlib.suppress(OSError, ValueError):
            for line in self.oom_file.read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        return -1

    def close(self) -> None:
        """Remove the container and what it was given (safe to call twice, from any thread)."""
        with contextlib.suppress(Exception):
            self.link.abort()
        with _LIVE_LOCK:
            _LIVE.discard(self)
        _remove(self.container)
        with contextlib.suppress(OSError):  # at exit the idmapped workspace's staging may be gone already
            self.binds.close()
        shutil.rmtree(self.sock_dir, ignore_errors=True)
        shutil.rmtree(self.code_dir, ignore_errors=True)


def _warm_config(config: dict[str, Any], sock_dir: Path, code_dir: Path) -> dict[str, Any]:
    """The per-call container's settings, with the executor as its command, the socket's folder and the
    code folder bound read-only, one more process for the executor, and removal by the engine on exit."""
    argv = executor_argv(f"{SOCKET_DIR}/s")
    volumes = {k: v for k, v in config["volumes"].items() if v["bind"] != "/code"}
    return {**config, "entrypoint": argv[:1], "command": argv[1:], "auto_remove": True,
            "labels": {**config["labels"], "shou.warm": f"{socket.gethostname()}:{os.getpid()}"},
            "pids_limit": config["pids_limit"] + 1,
            "volumes": {**volumes, str(sock_dir): {"bind": SOCKET_DIR, "mode": "ro"},
                        str(code_dir): {"bind": "/code", "mode": "ro"}}}


def _check_peer(conn: socket.socket, container_id: str) -> None:
    """The connection must come from a process of that container (its cgroup names the container)."""
    pid, _, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    try:
        groups = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError as exc:
        raise WarmFailed(f"cannot tell who connected: {exc}") from exc
    if container_id not in groups:
        conn.close()
        raise WarmFailed("a process outside the container connected to the executor's socket")


def _oom_file(container_id: str) -> Path | None:
    for path in (f"/sys/fs/cgroup/memory/docker/{container_id}/memory.oom_control",
                 f"/sys/fs/cgroup/docker/{container_id}/memory.events",
                 f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/memory.events"):
        if os.path.exists(path):
            return Path(path)
    return None


def _write_code(code_dir: Path, files: dict[str, bytes], stdin: bytes | None) -> str | None:
    """Replace the code folder's content with `files` (and stdin); the name of the stdin file, if any."""
    for entry in os.scandir(code_dir):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    stdin_name = ".shou-stdin" if stdin is not None else None
    for name, data in {**files, **({stdin_name: stdin} if stdin_name and stdin is not None else {})}.items():
        rel = PurePosixPath(name)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise UserError(f"file name {name!r} must be a relative path under /code, without '..'")
        path = code_dir.joinpath(*rel.parts)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        path.write_bytes(data)
        path.chmod(0o644)
        for parent in path.relative_to(code_dir).parents:
            (code_dir / parent).chmod(0o755)
    return stdin_name


@atexit.register
def _remove_all() -> None:
    """Remove every warm container still alive when the interpreter exits."""
    with _LIVE_LOCK:
        live = list(_LIVE)
        _LIVE.clear()
    for warm in live:
        warm.close()


def _sweep_stale() -> None:
    """Remove the socket and code folders of warm containers whose shou process died (kill -9)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(tempfile.gettempdir()):
            bits = entry.name.split("-")
            if entry.name.startswith("shou-warm-") and len(bits) >= 4:
                pid = bits[-2]
                if pid.isdigit() and int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}"):
                    shutil.rmtree(entry.path, ignore_errors=True)


def _remove(container: Any) -> None:
    """Remove the container and wait until the engine has (it auto-removes too: the two may race)."""
    discard(container)
    with contextlib.suppress(Exception):  # gone already: the engine answers 404
        container.client.api.wait(container.id, timeout=KILL_GRACE, condition="removed")
