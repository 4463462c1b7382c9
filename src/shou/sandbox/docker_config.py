"""What a Docker sandbox's container is made of: the options `client.containers.create(...)` gets (limits,
no network, no capabilities, the seccomp allow-list, read-only root, tmpfs), who the program runs as, and the
read-only folder of the run's code files. `docker.py` runs containers made so."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import UserError
from ..git_protect import GIT_ENV
from ..workspace import STATE_DIR
from .base import Limits
from .bubblewrap import SANDBOX_UID
from .docker_seccomp import profile_json

__all__ = ["CODE_DIR", "STDIN_FILE", "WORKSPACE_DIR", "checked_user", "default_user", "is_dir", "options", "utf8",
           "write_code_dir"]

WORKSPACE_DIR = "/workspace"
CODE_DIR = "/code"
STDIN_FILE = ".shou-stdin"
MiB = 1024 * 1024


def options(argv: list[str], limits: Limits, image: str, user: str, volumes: dict[str, dict[str, str]],
            hidden: list[str]) -> dict[str, Any]:
    """The keyword arguments for `client.containers.create(...)` that run `argv` in `image` as `user` under
    `limits`, with `volumes` bound and the workspace folders `hidden` (the user's shou config) shown empty."""
    fsize = limits.file_size_mb * MiB
    # tmpfs pages count against the container's memory anyway, so more than memory_mb could never be used.
    tmp_mb = max(1, min(limits.file_size_mb, limits.memory_mb))
    uid, _, gid = user.partition(":")
    gid = gid or uid
    return {
        "image": image,
        # Entrypoint = argv[0] replaces the image's own (node's and temurin's wrap the command).
        "entrypoint": argv[:1],
        "command": argv[1:],
        "user": user,
        "working_dir": WORKSPACE_DIR,
        # The sandbox uid has no home; GIT_ENV: git obeys no config the program could have planted.
        "environment": {"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", **GIT_ENV},
        "labels": {"shou": "1"},
        "volumes": volumes,
        "read_only": True,
        # shou's own state is hidden, as in the bubblewrap sandbox.
        # The engine copies the mode of the image's own /tmp (root's 0755 in some): make it the user's.
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={tmp_mb}m,mode=1777,uid={uid},gid={gid}",
                  f"{WORKSPACE_DIR}/{STATE_DIR}": "ro,nosuid,nodev,size=64k",
                  # The user's shou config folder (API keys, the key that signs approvals) is not the
                  # program's to read: its top folder's read-only bind stops writes, an empty read-only
                  # folder over it stops reads. Bound as an empty copy (no right to mount), the top
                  # folder shows none of it already, and has no place for this mount.
                  **{f"{WORKSPACE_DIR}/{rel}": "ro,nosuid,nodev,noexec,size=4k" for rel in hidden}},
        "mem_limit": limits.memory_mb * MiB,
        "memswap_limit": limits.memory_mb * MiB,  # equal to mem_limit: no swap
        "nano_cpus": 1_000_000_000,
        # docker-init (below) is one more process. It keeps the program from being PID 1, which the
        # kernel shields from SIGXCPU, so the CPU rlimit works; it also reaps zombies.
        "init": True,
        "pids_limit": limits.processes + 1,
        "ulimits": [
            {"name": "fsize", "soft": fsize, "hard": fsize},
            {"name": "core", "soft": 0, "hard": 0},
            # SIGXCPU at the soft limit, SIGKILL a second later if the program ignores it.
            {"name": "cpu", "soft": limits.cpu, "hard": limits.cpu + 1},
        ],
        "network_disabled": not limits.network,
        "network_mode": "bridge" if limits.network else "none",
        "cap_drop": ["ALL"],
        # The engine's default seccomp profile lets chmod set set-id bits: ours replaces it (docker_seccomp.py).
        "security_opt": ["no-new-privileges", "seccomp=" + profile_json()],
        "stdin_open": False,
        "tty": False,  # keeps stdout and stderr apart
        "auto_remove": False,  # we read the logs and state after exit, then remove it ourselves
        # The engine keeps logs on its disk: cap them (output past ~64 MB loses its head; we keep 50 MB).
        "log_config": {"type": "json-file", "config": {"max-size": "32m", "max-file": "2"}},
    }


def default_user(workspace: Path) -> str:
    """`uid:gid` the program runs as: never root. As root, the sandbox uid (which sees the workspace through
    an idmapped mount, as in the bubblewrap sandbox); otherwise the workspace's owner, or the caller when
    the workspace is root's or does not exist yet (it is made by us, then)."""
    if os.geteuid() == 0:
        return f"{SANDBOX_UID}:{SANDBOX_UID}"
    with contextlib.suppress(OSError):
        st = os.stat(workspace)
        if st.st_uid != 0:
            return f"{st.st_uid}:{st.st_gid}"
    return f"{os.getuid()}:{os.getgid()}"


def checked_user(user: str) -> str:
    """`user` unless it names root (uid 0, or a name the engine would look up): a UserError then."""
    uid = user.split(":", 1)[0]
    if not uid.isdigit() or int(uid) == 0:
        raise UserError(f"the Docker sandbox runs code as a numeric non-root uid, not {user!r}: root in the "
                        "container owns what it writes in the workspace and could leave set-id programs there")
    return user




def is_dir(path: Path) -> bool:
    with contextlib.suppress(OSError):
        return stat.S_ISDIR(os.lstat(path).st_mode)
    return False




def write_code_dir(files: dict[str, bytes], stdin: bytes | None) -> Path:
    """A fresh host directory holding `files` (and stdin), readable by any user the container runs as."""
    root = Path(tempfile.mkdtemp(prefix="shou-code-"))
    try:
        entries = {**files, STDIN_FILE: stdin} if stdin is not None else files
        for name, data in entries.items():
            rel = PurePosixPath(name)
            if rel.is_absolute() or ".." in rel.parts or not rel.parts:
                raise UserError(f"file name {name!r} must be a relative path under {CODE_DIR}, without '..'")
            path = root.joinpath(*rel.parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        # mkdtemp makes 0700 and the umask may strip more: the container's user is not us.
        root.chmod(0o755)
        for path in root.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root




def utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a file name's undecodable bytes (surrogate escapes)
        return False
    return True
