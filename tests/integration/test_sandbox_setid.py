"""Issue 28, item 1: sandboxed code cannot leave a set-id program (or a device, or file capabilities) in
a root-owned workspace, on either backend. The exact attack: `cp /bin/bash ./rootsh && chmod 4755
./rootsh` in the sandbox, then `runuser -u nobody -- ./rootsh -p` on the host read /etc/shadow."""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from shou.sandbox.base import Limits

from .test_sandbox_privileges import BACKENDS, ROOT, make, release

pytestmark = pytest.mark.skipif(not ROOT, reason="a set-id program is a danger when the workspace is root's")

BASH_COPY = "cp /bin/bash rootsh && "
ATTACKS = {
    "chmod 4755": BASH_COPY + "chmod 4755 rootsh",
    "chmod u+s": BASH_COPY + "chmod u+s rootsh",
    "chmod g+s": BASH_COPY + "chmod g+s rootsh",
    "install -m 4755": "install -m 4755 /bin/bash rootsh",
    "python os.chmod": BASH_COPY + "python3 -c 'import os; os.chmod(\"rootsh\", 0o6755)'",
    "python fchmod": BASH_COPY + "python3 -c 'import os; os.fchmod(os.open(\"rootsh\", os.O_RDONLY), 0o4755)'",
    "python chmod at a dir fd": BASH_COPY + "python3 -c 'import os; os.chmod(\"rootsh\", 0o4755, dir_fd=os.open("
                                            "\".\", os.O_RDONLY))'",
    "created set-id": "python3 -c 'import os; fd = os.open(\"rootsh\", os.O_CREAT | os.O_WRONLY, 0o4755); "
                      "os.write(fd, open(\"/bin/bash\", \"rb\").read())'",
    "tar -p": "tar -xpf setid.tar",
    "mknod device": "mknod rootdev b 8 0",
    "mknod set-id fifo": "python3 -c 'import os, stat; os.mknod(\"fifo\", stat.S_IFIFO | 0o4644)'",
    "setcap": BASH_COPY + "python3 -c 'import os; os.setxattr(\"rootsh\", \"security.capability\", "
                          "bytes.fromhex(\"01000002ffffffff000000000000000000000000\"))'",
}


@pytest.fixture
def open_workspace() -> Iterator[Path]:
    """A root-owned workspace any user can reach, as the red team's was (/tmp/pytest-of-root is 0700)."""
    base = Path(tempfile.mkdtemp(dir="/tmp", prefix="shou-setid-"))
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def setid_tar() -> bytes:
    """A tarball holding a setuid-root copy of bash, as a downloaded archive might."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tar.gettarinfo("/bin/bash", arcname="rootsh")
        info.mode, info.uid, info.gid = 0o4755, 0, 0
        with open("/bin/bash", "rb") as f:
            tar.addfile(info, f)
    return buf.getvalue()


def dangerous(root: Path) -> list[str]:
    """Files under `root` that would give another user more than they have: set-id bits, devices, caps."""
    found = []
    for path in [root, *root.rglob("*")]:
        st = os.lstat(path)
        if st.st_mode & (stat.S_ISUID | stat.S_ISGID) and not stat.S_ISDIR(st.st_mode):
            found.append(f"{path.name}: mode {oct(st.st_mode)}")
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            found.append(f"{path.name}: a device")
        if stat.S_ISREG(st.st_mode):
            try:
                os.getxattr(path, "security.capability", follow_symlinks=False)
                found.append(f"{path.name}: file capabilities")
            except OSError:
                pass
    return found


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_no_set_id_program_is_left_for_another_user(backend: str, attack: str, open_workspace: Path) -> None:
    (open_workspace / "setid.tar").write_bytes(setid_tar())
    box = make(backend, open_workspace, Limits(timeout=60))
    try:
        r = await box.run(["bash", "-c", ATTACKS[attack]])
    finally:
        release(box)
    assert r.reason == "exit" and r.exit_code != 0 and "not permitted" in r.stderr, r.for_model()
    assert dangerous(open_workspace) == []
    shell = open_workspace / "rootsh"
    if shell.exists():  # what the red team did next: another user runs it, hoping for root
        done = subprocess.run(["runuser", "-u", "nobody", "--", str(shell), "-p", "-c", "id -u; cat /etc/shadow"],
                              capture_output=True, text=True, timeout=30)
        assert done.stdout.split()[:1] != ["0"] and "root:" not in done.stdout, done.stdout


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_workspace_is_mounted_nosuid_nodev_for_a_non_root_uid(backend: str, workspace: Path) -> None:
    box = make(backend, workspace, Limits(timeout=60))
    try:
        r = await box.run(["bash", "-c", "id -u; id -g; grep ' /workspace ' /proc/self/mountinfo; echo x > made.txt"])
    finally:
        release(box)
    assert r.ok, r.for_model()
    uid, gid, mount = r.stdout.splitlines()
    assert uid != "0" and gid != "0"
    options = mount.split()[5].split(",")
    assert "nosuid" in options and "nodev" in options, mount
    st = (workspace / "made.txt").stat()
    owner = workspace.stat()
    assert (st.st_uid, st.st_gid) == (owner.st_uid, owner.st_gid)  # lands as the workspace owner's


# unshare(2) through ctypes (os.unshare is 3.12+): a user namespace, and a mount namespace inside one.
UNSHARE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for flags in (0x10000000, 0x10000000 | 0x00020000):
    print("made" if libc.unshare(flags) == 0 else f"refused {ctypes.get_errno()}")
"""


@pytest.mark.parametrize("backend", BACKENDS)
async def test_user_namespaces_cannot_be_made(backend: str, workspace: Path) -> None:
    box = make(backend, workspace, Limits(timeout=60))
    try:
        r = await box.run(["python3", "-c", UNSHARE])
    finally:
        release(box)
    assert "made" not in r.stdout and r.stdout.count("refused") == 2, r.for_model()


def test_docker_refuses_to_run_code_as_root(workspace: Path) -> None:
    from shou.errors import UserError
    from shou.sandbox.docker import DockerSandbox

    for user in ("0:0", "0", "root", "root:root"):
        with pytest.raises(UserError, match="non-root uid"):
            DockerSandbox(workspace, user=user)
