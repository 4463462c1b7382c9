"""The workspace as the sandbox sees it when shou runs as root: an idmapped mount.

Running sandboxed code as root (even root mapped into a user namespace with no capabilities) is not
safe: the kernel still treats that uid as the owner of `/proc/sys`, `/proc/sysrq-trigger` and root's
keyrings. So as root the sandbox runs as a dedicated unprivileged uid, and the workspace is mounted for
it through an idmapped mount (Linux 5.12+, `mount_setattr(MOUNT_ATTR_IDMAP)`): inside that mount the
workspace owner's files appear to belong to the sandbox uid, and what the sandbox writes lands on disk
as the owner's. No mode, owner or ACL of the person's files changes, and nothing outside the workspace
becomes readable to the sandbox uid.

The mount lives under a fresh `/run/shou/<pid>-XXXX/` that only the sandbox uid may enter, in a folder
only root may write (nobody else can plant names there for the cleanup to follow). It is made private
(no propagation to other mount namespaces) and removed when the process exits; mounts left by a process
that was killed are removed by the next one.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import stat
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from ..errors import UserError

__all__ = ["IdmappedWorkspace", "idmap_supported"]

# Syscall numbers of the new mount API are the same on every architecture (they were added after the
# tables were unified).
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
OPEN_TREE_CLONE = 1
AT_FDCWD, AT_EMPTY_PATH = -100, 0x1000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_IDMAP = 0x2, 0x4, 0x00100000
MS_BIND, MS_PRIVATE = 4096, 1 << 18
MNT_DETACH, UMOUNT_NOFOLLOW = 2, 8
STAGING = Path("/run/shou")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_live: set[IdmappedWorkspace] = set()
_lock = threading.Lock()


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _userns_fd(inner_uid: int, inner_gid: int, outer: int) -> int:
    """A user namespace whose id map sends the workspace owner (inner) to the sandbox uid (outer)."""
    holder = subprocess.Popen(["unshare", "--user", "cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        ours = os.readlink("/proc/self/ns/user")
        for _ in range(500):  # until unshare(2) has run in the child
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{holder.pid}/ns/user") != ours:
                    break
            time.sleep(0.002)
        else:
            raise OSError("the helper process never entered its user namespace")
        Path(f"/proc/{holder.pid}/uid_map").write_text(f"{inner_uid} {outer} 1\n")
        Path(f"/proc/{holder.pid}/setgroups").write_text("deny\n")
        Path(f"/proc/{holder.pid}/gid_map").write_text(f"{inner_gid} {outer} 1\n")
        return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        holder.kill()
        holder.wait()


class IdmappedWorkspace:
    """The workspace mounted so that its owner's files belong to `uid`; `path` is what the sandbox binds."""

    def __init__(self, path: Path, base: Path) -> None:
        self.path = path
        self._base = base

    @classmethod
    def create(cls, workspace: Path, uid: int) -> IdmappedWorkspace:
        """Mount `workspace` for `uid`; `UserError` saying why when this kernel or file system cannot."""
        st = os.stat(workspace)
        tree = ns = -1
        try:
            staging = _staging()
            _remove_stale(staging)
            base = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=staging))
        except OSError as e:
            raise UserError(f"running as root, the sandbox stages the workspace under {STAGING} and cannot: {e}") \
                from None
        target = base / "ws"
        try:
            target.mkdir()
            # A private bind of our own folder: the mount below must not propagate to other namespaces.
            _check(_libc.mount(bytes(base), bytes(base), None, MS_BIND, None), "bind")
            _check(_libc.mount(None, bytes(base), None, MS_PRIVATE, None), "make private")
            os.chown(base, uid, uid)  # only the sandbox uid (and root) may enter
            os.chmod(base, 0o700)
            ns = _userns_fd(st.st_uid, st.st_gid, uid)
            tree = _check(_libc.syscall(SYS_OPEN_TREE, AT_FDCWD, bytes(workspace), OPEN_TREE_CLONE | os.O_CLOEXEC),
                          "open_tree")
            attr = struct.pack("QQQQ", MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, ns)
            _check(_libc.syscall(SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH, attr, len(attr)), "mount_setattr")
            _check(_libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, bytes(target), MOVE_MOUNT_F_EMPTY_PATH),
                   "move_mount")
        except OSError as e:
            _unmount(base)
            raise UserError(
                f"running as root, the sandbox needs an idmapped mount of the workspace ({workspace}) so that "
                f"sandboxed code runs unprivileged, and this failed: {e}. That needs Linux 5.12+ and a file "
                "system that supports idmapped mounts (ext4, xfs, btrfs, tmpfs 6.3+). Run shou as a normal "
                "user, or choose another backend (--sandbox)"
            ) from None
        finally:
            for fd in (tree, ns):
                if fd >= 0:
                    os.close(fd)
        mounted = cls(target, base)
        with _lock:
            if not _live:
                atexit.register(_remove_all)
            _live.add(mounted)
        return mounted

    @property
    def staging(self) -> Path:
        """The private folder (root's and the sandbox uid's only) holding the mount: room for more."""
        return self._base

    def close(self) -> None:
        """Unmount and remove the staging folder."""
        with _lock:
            _live.discard(self)
        _unmount(self._base)


def _staging() -> Path:
    """`/run/shou`, made if missing; it must be root's and writable by root only."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(STAGING, 0o711)
    st = os.lstat(STAGING)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise OSError(f"{STAGING} must be a folder owned by root and writable by root only")
    os.chmod(STAGING, 0o711)  # the sandbox uid passes through to its own folder; nobody lists it
    return STAGING


def _unmount(base: Path) -> None:
    _remove_binds(base)
    for path in (base / "ws", base):
        _libc.umount2(bytes(path), MNT_DETACH | UMOUNT_NOFOLLOW)
    # rmdir, never a recursive delete: should an unmount have failed, "ws" is still the workspace.
    for path in (base / "ws", base):
        with contextlib.suppress(OSError):
            os.rmdir(path)


def _remove_binds(base: Path) -> None:
    """The Docker sandbox's per-call bind sources (`docker_binds.py`) left by a process that did not close
    them: unmount each, then remove only what is no mount point (never a recursive delete)."""
    with contextlib.suppress(OSError):
        for folder in os.scandir(base):
            if not folder.name.startswith("binds-") or not folder.is_dir(follow_symlinks=False):
                continue
            for entry in os.scandir(folder.path):
                _libc.umount2(os.fsencode(entry.path), MNT_DETACH | UMOUNT_NOFOLLOW)
                with contextlib.suppress(OSError):
                    os.rmdir(entry.path) if entry.is_dir(follow_symlinks=False) else os.unlink(entry.path)
            with contextlib.suppress(OSError):
                os.rmdir(folder.path)


def _remove_all() -> None:
    for mounted in list(_live):
        mounted.close()


def _remove_stale(staging: Path) -> None:
    """Unmount what processes that died without cleaning up (kill -9) left behind."""
    for entry in os.scandir(staging):
        pid = entry.name.split("-", 1)[0]
        if entry.is_dir(follow_symlinks=False) and pid.isdigit() and int(pid) != os.getpid() \
                and not os.path.exists(f"/proc/{pid}"):
            _unmount(Path(entry.path))


def idmap_supported() -> tuple[bool, str]:
    """Whether idmapped mounts work here (root only), and why not."""
    if os.geteuid() != 0:
        return False, "not root"
    probe = Path(tempfile.mkdtemp(prefix="shou-idmap-probe-"))
    try:
        IdmappedWorkspace.create(probe, 65534).close()
        return True, "idmapped mounts work"
    except UserError as e:
        return False, str(e)
    finally:
        shutil.rmtree(probe, ignore_errors=True)
