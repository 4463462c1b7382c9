"""A sandbox that runs each command in a fresh Docker container, through the Docker SDK for Python.

One run is create -> start -> wait (kill at the wall-clock limit or past the run's disk allowance) -> read
the logs -> remove. The container has no network, no capabilities, no new privileges, a seccomp
allow-list of its own (`docker_seccomp.py`: no set-id bits, no namespaces), a read-only root filesystem
with a small tmpfs at /tmp, memory without swap, one CPU, a process cap and rlimits; the workspace is
bound read-write at /workspace (its settings files and a repository's config and hooks read-only, its
repository folders bound over themselves, all from sources no program can swap: `docker_binds.py`) and
the run's files read-only at /code. Code never runs as root: as root it runs as `SANDBOX_UID` on the
same idmapped, nosuid, nodev workspace mount the bubblewrap sandbox uses (the engine binds that mount,
so it must share shou's mount namespace). The SDK (`pip install 'shou[docker]'`) is imported only when
first needed.

The engine must see the host's paths (a local engine, or Docker Desktop's shared folders): both the
workspace and the code files are bind mounts. Code goes in by bind rather than `put_archive` because the
engine refuses to extract archives into a read-only root filesystem.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UserError
from ..git_protect import Protected, protect, remove_planted
from ..workspace import hidden_config, read_only_tops, state_dir
from .base import ExecResult, Limits, OutputCapture, new_output_path
from .bubblewrap import SANDBOX_UID
from .docker_binds import PinnedBinds
from .docker_config import (
    CODE_DIR,
    STDIN_FILE,
    WORKSPACE_DIR,
    MiB,
    checked_user,
    default_user,
    is_dir,
    options,
    utf8,
    write_code_dir,
)
from .docker_engine import create, discard, read_logs, start, wait
from .docker_result import docker_result
from .docker_warm import WarmContainer, WarmFailed
from .languages import program
from .quota import DiskAllowance, current_allowance
from .warm_link import NotStarted, signature

if TYPE_CHECKING:
    from .idmap import IdmappedWorkspace

DEFAULT_IMAGES: dict[str, str] = {
    "python": "python:3.12-slim",
    "bash": "python:3.12-slim",  # has bash, and python for the scripts that call it
    "node": "node:20-slim",
    "java": "eclipse-temurin:17-jdk",
}
READ_ONLY_FILES = ("shou.toml", ".env")
INSTALL_HINT = "pip install 'shou[docker]'"
# `program()` names the runtime first; that picks the image.
RUNTIME_LANGUAGE = {"python3": "python", "bash": "bash", "node": "node", "java": "java"}


def _sdk() -> Any:
    """The `docker` module, or a UserError that says how to install it."""
    try:
        import docker
    except ImportError as exc:
        raise UserError(f"the Docker sandbox needs the Docker SDK for Python: {INSTALL_HINT}") from exc
    return docker


class DockerSandbox:
    """Runs commands and code in throwaway Docker containers (one per call), under `limits`.

    `images` overrides the image per language (keys: python, bash, node, java; plain `run()` uses
    bash's). `user` is who the program runs as, never root: by default, as root, `SANDBOX_UID` on an
    idmapped, nosuid, nodev view of the workspace in which the owner's files are its own (what it writes
    lands as the owner's); otherwise the workspace's owner. `client` is a `docker.DockerClient` (made
    with `docker.from_env()` on first use when not given). `warm` runs calls in one long-lived container
    through its resident executor (`docker_warm.py`; ~100 ms less per call); by default it is on when the
    client is made here from the environment (the engine is local: it must reach shou's socket folder).
    """

    name = "docker"

    def __init__(self, workspace: Path, limits: Limits = Limits(), *, images: dict[str, str] | None = None,
                 user: str | None = None, client: Any = None, warm: bool | None = None) -> None:
        self.workspace = Path(workspace).resolve()  # the engine needs absolute bind sources
        self.limits = limits
        self.images = {**DEFAULT_IMAGES, **(images or {})}
        self.user = checked_user(user if user is not None else default_user(self.workspace))
        self.allowance = DiskAllowance(limits.disk_mb * MiB, limits.inodes)  # calls made outside any agent run
        self._client = client
        self._mount: IdmappedWorkspace | None = None
        self._unclaimed: list[PinnedBinds] = []
        self._protected = Protected((), ())
        self.warm = client is None if warm is None else warm
        self._warm: WarmContainer | None = None
        self._warming = False
        self._cold_images: set[str] = set()  # images the executor cannot run in (no python3)

    @property
    def warm_id(self) -> str | None:
        """The id of the warm container, while there is one."""
        return self._warm.container.id if self._warm is not None else None

    def _source(self) -> Path:
        """The folder bound at /workspace: the idmapped view for the sandbox uid, else the workspace itself."""
        if not self.user.startswith(f"{SANDBOX_UID}:"):
            return self.workspace
        if self._mount is None:
            from .idmap import IdmappedWorkspace

            self._mount = IdmappedWorkspace.create(self.workspace, SANDBOX_UID)
        return self._mount.path

    def close(self) -> None:
        """Remove the warm container and release the idmapped mount (both made again on the next run)."""
        if self._warm is not None:
            warm, self._warm = self._warm, None
            warm.close()
        while self._unclaimed:
            self._unclaimed.pop().close()
        if self._mount is not None:
            mount, self._mount = self._mount, None
            mount.close()

    @staticmethod
    def available() -> tuple[bool, str]:
        """Whether a Docker engine answers here, and why not when it does not (never raises)."""
        try:
            import docker
        except ImportError:
            return False, f"the Docker SDK for Python is not installed: {INSTALL_HINT}"
        host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        try:
            client = docker.from_env(timeout=5)
            try:
                client.ping()
            finally:
                client.close()
        except Exception as exc:  # any failure means "not usable"; the reason names the usual fixable one
            why = " (permission denied: is your user in the docker group?)" if "ermission denied" in str(exc) else ""
            return False, f"no Docker engine answers at {host}{why}"
        if os.geteuid() == 0:  # code runs as the sandbox uid on an idmapped workspace, never as root
            from .idmap import idmap_supported

            ok, why = idmap_supported()
            if not ok:
                return False, why
        return True, f"a Docker engine answers at {host}" + (
            f"; as root: runs as uid {SANDBOX_UID} on an idmapped workspace" if os.geteuid() == 0 else "")

    def pinned_binds(self) -> PinnedBinds:
        """Fresh bind sources for one container (close them once it is created, or with the sandbox)."""
        source = self._source()
        if self._mount is not None:
            return PinnedBinds(source, self._mount.staging, mount=True)
        return PinnedBinds(source, Path(tempfile.gettempdir()), mount=False)

    def container_config(self, argv: list[str], limits: Limits, code_dir_host: Path | str, *,
                         image: str | None = None, binds: PinnedBinds | None = None) -> dict[str, Any]:
        """The keyword arguments for `client.containers.create(...)` that run `argv` under `limits`;
        `binds` holds the sources of the binds inside the workspace (made, and kept until `close`, if not given)."""
        if not argv:
            raise UserError("argv is empty: give the command to run")
        if binds is None:
            binds = self.pinned_binds()
            self._unclaimed.append(binds)
        source = self._source()
        volumes = {
            str(source): {"bind": WORKSPACE_DIR, "mode": "rw"},
            **self._workspace_binds(source, binds),
            str(code_dir_host): {"bind": CODE_DIR, "mode": "ro"},
        }
        hidden = hidden_config(self.workspace) if binds.mount else []
        return options(argv, limits, image or self.images["bash"], self.user, volumes, hidden)

    def _workspace_binds(self, source: Path, pinned: PinnedBinds) -> dict[str, dict[str, str]]:
        """The workspace's settings files and a repository's config and hooks, read-only, and its
        repository folders over themselves (so that they cannot be renamed away), all from sources no
        program can redirect (`docker_binds.py`)."""
        tops, absent = read_only_tops(self.workspace)  # its missing start-up files: `missing_host_files`
        protected = protect(self.workspace, absent=tuple(absent), skip=tuple(tops))
        for rel in (*protected.git_dirs, *protected.read_only):
            # The engine's `-v source:target:mode` cannot spell a ':', and its API (JSON) no name that is not UTF-8.
            if ":" in rel or not utf8(rel):
                shown = rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                raise UserError(f"{self.workspace / shown} is a git repository's folder or file the container must "
                                "see read-only, but Docker cannot bind a path holding ':' or bytes that are not "
                                "UTF-8; the command was not run. Rename or remove it, or use the bubblewrap sandbox")
        self._protected = protected
        binds = {}
        for rel in protected.git_dirs:
            path = pinned.add(rel, read_only=False)
            if path is None and is_dir(source / rel):
                path = str(source / rel)  # not root: no way to pin it but by path
            if path is not None:
                binds[path] = {"bind": f"{WORKSPACE_DIR}/{rel}", "mode": "rw"}
        # What the host trusts or runs code from (shou's config, its Python, a home's start-up files), by top
        # folder as in the bubblewrap sandbox (`workspace.read_only_tops`). Without the right to mount, a
        # folder is bound as an empty read-only one: the program sees none of it.
        for rel in (*READ_ONLY_FILES, *protected.read_only, *tops):
            path = pinned.add(rel, read_only=True)
            if path is not None:
                # "rw": the mount (or the copy's folder) is read-only itself, and the engine's ro remount
                # would drop nosuid and nodev. A copy is writable by nobody but root.
                binds[path] = {"bind": f"{WORKSPACE_DIR}/{rel}", "mode": "rw" if pinned.mount else "ro"}
        return binds

    async def run(self, argv: list[str], *, stdin: bytes | None = None, limits: Limits | None = None,
                  files: dict[str, bytes] | None = None) -> ExecResult:
        """Run `argv` in a container of the bash image, in /workspace, with `files` read-only under /code."""
        clamped = (limits or self.limits).within(self.limits)
        return await self._run(argv, stdin, clamped, files or {}, self.images["bash"])

    async def run_code(self, language: str, code: str, *, limits: Limits | None = None) -> ExecResult:
        """Run a program written in `language` (python, bash, node or java) in that language's image."""
        clamped = (limits or self.limits).within(self.limits)  # before program(): heap flags follow memory
        argv, files = program(language, code, clamped, CODE_DIR)
        return await self._run(argv, None, clamped, files, self.images[RUNTIME_LANGUAGE[argv[0]]])

    async def _run(self, argv: list[str], stdin: bytes | None, limits: Limits, files: dict[str, bytes],
                   image: str) -> ExecResult:
        allowance = current_allowance(self.allowance)
        if spent := allowance.spent():
            return ExecResult("", "", None, 0.0, "disk", note=spent)
        client = await self._docker_client()
        self.workspace.mkdir(parents=True, exist_ok=True)  # else the engine creates it, owned by root
        state_dir(self.workspace)  # a real folder for the tmpfs to cover, made before any container runs
        warm = await self._warm_for(client, image, limits)
        if warm is not None:
            try:
                return await warm.run(self.workspace, self._protected, argv, stdin, limits, files, allowance)
            except NotStarted:  # its executor died after its last call: the command in a container of its own
                pass
            finally:
                if warm.dead:
                    if self._warm is warm:
                        self._warm = None
                    await asyncio.shield(asyncio.to_thread(warm.close))
        if stdin is not None:
            # Attaching to a container's stdin is fragile across engines; a file and a redirect are not.
            argv = ["/bin/sh", "-c", f'exec "$@" < {CODE_DIR}/{STDIN_FILE}', "sh", *argv]
        code_dir = write_code_dir(files, stdin)
        container: Any = None
        binds: PinnedBinds | None = None
        try:
            binds = self.pinned_binds()
            config = self.container_config(argv, limits, code_dir, image=image, binds=binds)
            protected = self._protected
            container = await create(client, config)
            result = await self._execute(container, limits, allowance)
            planted = remove_planted(self.workspace, protected)
            return replace(result, note="; ".join(x for x in (result.note, planted) if x)) if planted else result
        finally:
            if binds is not None:
                binds.close()
            if container is not None:
                # Shielded: a second cancellation must not stop the removal half-way.
                await asyncio.shield(asyncio.to_thread(discard, container))
            shutil.rmtree(code_dir, ignore_errors=True)

    async def _warm_for(self, client: Any, image: str, limits: Limits) -> WarmContainer | None:
        """The warm container for this call, started if need be; None when the call must have a container
        of its own (warm off, another image or container-wide limits, a parallel call, no python3 in the
        image). A container whose protected paths changed, that died or that another event loop made is
        replaced."""
        if not self.warm or image in self._cold_images or self._warming:
            return None
        tops, absent = read_only_tops(self.workspace)  # its missing start-up files: `missing_host_files`
        protected = protect(self.workspace, absent=tuple(absent), skip=tuple(tops))
        # Made with the sandbox's own limits (the executor sets each call's rlimits, never past these).
        key = (image, self.limits.memory_mb, self.limits.processes, self.limits.network, protected,
               signature(self.workspace, (*protected.git_dirs, *READ_ONLY_FILES, *protected.read_only,
                                          *tops, *protected.absent,
                                          *hidden_config(self.workspace))),
               asyncio.get_running_loop())
        warm = self._warm
        if warm is not None and warm.busy:
            return None
        if warm is not None and (warm.link.stale() or warm.key[4:] != key[4:]):
            self._warm = None
            await asyncio.shield(asyncio.to_thread(warm.close))
            warm = None
        if (limits.memory_mb, limits.processes, limits.network) != key[1:4]:
            return None  # other container-wide limits: a container of its own, as before
        if warm is not None:
            if warm.key[0] != image:
                return None  # another language's image: a container of its own
            self._protected = protected
            return warm
        self._warming = True
        try:
            binds = self.pinned_binds()
            try:
                config = self.container_config(["true"], self.limits, "<code>", image=image, binds=binds)
            except BaseException:  # a path Docker cannot bind (UserError): the pins made so far are let go
                binds.close()
                raise
            self._protected = protected
            self._warm = await WarmContainer.start(client, config, binds, key, int(self.user.split(":")[0]))
        except WarmFailed:
            self._cold_images.add(image)
            return None
        finally:
            self._warming = False
        return self._warm

    async def _docker_client(self) -> Any:
        if self._client is None:
            docker = _sdk()
            try:
                self._client = await asyncio.to_thread(docker.from_env)
            except docker.errors.DockerException as exc:
                raise UserError(f"no Docker engine answers ({exc}); start Docker or choose another sandbox") from exc
        return self._client

    async def _execute(self, container: Any, limits: Limits, allowance: DiskAllowance) -> ExecResult:
        started = time.monotonic()
        disk = allowance.watch(self.workspace, limits.disk_mb * MiB, limits.inodes)
        out = OutputCapture(spill_path=new_output_path(self.workspace, "docker"), budget=disk.room)
        err = OutputCapture(spill_path=new_output_path(self.workspace, "docker-stderr"), budget=disk.room)
        try:
            await start(container)
            exit_code, reason = await wait(container, limits, disk)
            duration = time.monotonic() - started
            await asyncio.to_thread(container.reload)
            oom_killed = bool((container.attrs.get("State") or {}).get("OOMKilled"))
            await asyncio.to_thread(read_logs, container, out, err)
        finally:
            out.close()
            err.close()
            allowance.charge(disk)  # after the logs are spilled: they take the run's disk as much as its files
        return docker_result(out, err, exit_code, reason, oom_killed, duration, limits, disk, self.workspace)


