"""Who sandboxed code runs as, what it can reach, and limits that hold for its whole process tree, on
both backends (bubblewrap and Docker, in the image `.ci/docker-image` builds).

Red-team findings 4 and 5: the sandbox used to grant its uid ACLs on the workspace (and traverse rights
on its parents), and joined its cgroup after the program had started. Issue 28: Docker ran code as uid 0
in a root-owned workspace, so a setuid-root shell could be left behind for anyone to run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shou.sandbox.base import Limits, Sandbox
from shou.sandbox.bubblewrap import SANDBOX_UID, BubblewrapSandbox

from .test_sandbox import docker_sandbox

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap is Linux-only")
SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = os.geteuid() == 0


BACKENDS = ["bubblewrap", "docker"]
# The containment tests run on each backend's warm sandbox (the default) and on a sandbox per call.
CONTAINMENT = [*BACKENDS, "bubblewrap-per-call", "docker-per-call"]


def make(backend: str, workspace: Path, limits: Limits) -> Sandbox:
    """A sandbox of `backend` on `workspace` (Docker: skipped, or failed under CI, without an engine);
    `-per-call`: with no warm sandbox."""
    name, _, per_call = backend.partition("-")
    if name == "docker":
        return docker_sandbox(workspace, limits, warm=not per_call)
    ok, why = BubblewrapSandbox.available()
    assert ok, f"bubblewrap must work here (.ci/install installs it): {why}"
    return BubblewrapSandbox(workspace, limits, warm=not per_call)


@contextlib.contextmanager
def own_file_system(path: Path, size_mb: int = 256) -> Iterator[Path]:
    """A tmpfs of its own at `path` (as root), so that the disk allowance, which watches the whole file
    system, sees only this test's writes and not those of everything else running on the machine."""
    if not ROOT:
        yield path
        return
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "shou-test", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def release(box: Sandbox) -> None:
    """Unmount what the sandbox mounted for its runs (the idmapped workspace, as root)."""
    close = getattr(box, "close", None)
    if close is not None:
        close()


@pytest.fixture(params=CONTAINMENT)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def sb(backend: str, workspace: Path) -> Iterator[Sandbox]:
    box = make(backend, workspace, Limits(timeout=60))
    yield box
    release(box)


def snapshot(root: Path) -> dict[str, tuple[int, int, int, str]]:
    """Mode, owner, group and ACL text of `root`, everything in it and every folder above it."""
    paths = [root, *root.parents, *root.rglob("*")]
    out = {}
    for p in paths:
        st = os.lstat(p)
        acl = subprocess.run(["getfacl", "-pc", str(p)], capture_output=True, text=True).stdout \
            if shutil.which("getfacl") and not stat.S_ISLNK(st.st_mode) else ""
        out[str(p)] = (st.st_mode, st.st_uid, st.st_gid, acl)
    return out


def can_read_as(uid: int, path: Path) -> bool:
    r = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "cat", str(path)],
                       capture_output=True)
    return r.returncode == 0


@pytest.mark.skipif(not ROOT, reason="the ACL grant happened as root")
async def test_no_mode_or_acl_changes_and_the_sandbox_uid_gains_nothing(backend: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    os.chmod(home, 0o700)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    os.chmod(home / ".ssh" / "id_rsa", 0o600)
    (home / "proj").mkdir()
    (home / "proj" / "main.py").write_text("print(1)\n")
    before = snapshot(home)
    for workspace in (home / "proj", home):  # a project, and shou doctor run in the home folder itself
        box = make(backend, workspace, Limits(timeout=30))
        try:
            r = await box.run(["sh", "-c", "echo made > made.txt; cat main.py 2>/dev/null; true"])
        finally:
            release(box)
        assert r.ok, r.for_model()
        (workspace / "made.txt").unlink()
        (workspace / ".shou").rmdir()
    assert snapshot(home) == before  # nothing above, in or beside the workspace changed mode, owner or ACL
    for uid in (SANDBOX_UID, 65534):
        assert not can_read_as(uid, home / ".ssh" / "id_rsa")
        assert not can_read_as(uid, home / "proj" / "main.py")


async def running(prefixes: tuple[bytes, ...], enough: Callable[[list[Any]], bool]) -> list[tuple[bytes, str, str]]:
    """(cmdline, status, cgroup) of the host's processes whose command line starts with one of `prefixes`,
    scanned again until `enough(found)` holds: waiting on the processes themselves, not on a guess at how
    long a sandbox takes to start on a busy machine."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                cmd = Path(entry.path, "cmdline").read_bytes()
                if cmd.startswith(prefixes):
                    found.append((cmd, Path(entry.path, "status").read_text(), Path(entry.path, "cgroup").read_text()))
            except OSError:
                continue
        if enough(found) or loop.time() > deadline:
            return found
        await asyncio.sleep(0.05)


async def test_sandboxed_code_is_unprivileged_on_the_host(sb: Sandbox, workspace: Path) -> None:
    # An odd duration, as below: no other process on the machine can pass for it.
    task = asyncio.ensure_future(sb.run(["sh", "-c", "sleep 3.719"]))
    found = await running((b"sleep\x003.719\x00",), bool)
    uids = set()
    for _, status, _ in found:
        line = next(x for x in status.splitlines() if x.startswith("Uid:"))
        uids.update(int(v) for v in line.split()[1:])
        caps = next(x for x in status.splitlines() if x.startswith("CapEff:"))
        assert int(caps.split()[1], 16) == 0
    await task
    expected = SANDBOX_UID if ROOT else os.geteuid()
    assert uids == {expected}  # real, effective, saved and fs uid alike; in Docker too, never 0
    r = await sb.run(["sh", "-c", "echo x > /proc/sys/kernel/hostname; echo h > /proc/sysrq-trigger; "
                                  "cat /etc/shadow; ls /root; id -u"])
    assert "cannot create /proc/sys/kernel/hostname" in r.stderr and "cannot create /proc/sysrq-trigger" in r.stderr
    assert "/etc/shadow: No such file" in r.stderr and r.stdout.strip() != "0"


@pytest.mark.skipif(not ROOT, reason="already a normal user: the rest of the suite covers that case")
def test_as_a_normal_user_files_stay_theirs_and_nothing_else_is_reachable() -> None:
    uid = 42424
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        shutil.copytree(SRC / "shou", base / "src" / "shou", ignore=shutil.ignore_patterns("__pycache__"))
        home = base / "home"
        (home / ".ssh").mkdir(parents=True)
        (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY OF THE USER\n")
        (home / "proj").mkdir()
        for p in (home, home / ".ssh", home / ".ssh" / "id_rsa", home / "proj"):
            os.chown(p, uid, uid)
        os.chmod(home, 0o700)
        os.chmod(home / ".ssh" / "id_rsa", 0o600)
        script = textwrap.dedent("""
            import asyncio, json, os
            from shou.sandbox.base import Limits
            from shou.sandbox.bubblewrap import BubblewrapSandbox
            ok, why = BubblewrapSandbox.available()
            sb = BubblewrapSandbox(os.path.expanduser("~/proj"), Limits(timeout=30))
            r = asyncio.run(sb.run(["sh", "-c", "id -u; echo made > made.txt; cat /etc/shadow; ls /home /root; "
                                              "cat ~/.ssh/id_rsa; find / -name id_rsa 2>/dev/null; true"]))
            print(json.dumps({"ok": ok, "why": why, "stdout": r.stdout, "stderr": r.stderr}))
        """)
        env = {"PYTHONPATH": str(base / "src"), "HOME": str(home), "PATH": "/usr/bin:/bin"}
        done = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "/usr/bin/python3",
                               "-c", script], env=env, cwd=home, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert out["ok"], out["why"]
        assert out["stdout"].split()[0] == str(uid)  # the user's own uid, not root, not a shared one
        assert "PRIVATE KEY" not in out["stdout"] and "id_rsa" not in out["stdout"]
        assert "/etc/shadow: No such file" in out["stderr"]
        made = home / "proj" / "made.txt"
        assert made.read_text() == "made\n" and (made.stat().st_uid, made.stat().st_gid) == (uid, uid)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------- item 5: limits cover the whole tree

EIGHT_CHILDREN = """
import os, time
kids = []
for i in range(8):
    pid = os.fork()
    if pid == 0:
        block = bytearray(450 * 2**20)
        for j in range(0, len(block), 4096):
            block[j] = 1
        print("child holds 450 MB", flush=True)
        time.sleep(2)
        os._exit(0)
    kids.append(pid)
print("finished:", sum(os.waitpid(p, 0)[1] == 0 for p in kids))
"""


async def test_memory_limit_holds_for_the_whole_process_tree(sb: Sandbox) -> None:
    r = await sb.run_code("python", EIGHT_CHILDREN)
    assert r.reason == "memory", r.for_model()
    assert r.stdout.count("holds 450 MB") <= 1  # 3.6 GB asked for in all, 512 MB allowed


@pytest.mark.parametrize("where", ["/dev/shm", "/tmp"])
async def test_memory_file_systems_count(sb: Sandbox, where: str) -> None:
    r = await sb.run(["sh", "-c", f"dd if=/dev/zero of={where}/fill bs=1M count=1600 status=none; "
                                  f"du -m {where}/fill"])
    sizes = [int(line.split()[0]) for line in r.stdout.splitlines() if line.endswith("/fill")]
    assert r.reason == "memory" or (sizes and max(sizes) <= 520), r.for_model()  # 512 MB, not 1600


async def test_every_process_is_in_the_run_cgroup_from_its_start(sb: Sandbox, workspace: Path) -> None:
    from shou.sandbox.bubblewrap import _cgroup_works

    docker = not isinstance(sb, BubblewrapSandbox)
    if not docker and not _cgroup_works():
        pytest.skip("no writable cgroup here: rlimits only")
    # An odd duration: no other process on the machine (a `sleep 40` elsewhere) can pass for one of these.
    task = asyncio.ensure_future(sb.run(["sh", "-c", "sleep 4.173 & (sleep 4.173 &) ; echo ready > ready; wait"]))
    # bwrap only for bubblewrap: under Docker a bwrap process is another test's, running beside this one.
    prefixes = (b"sleep\x004.173\x00", b'/bin/sh\x00-c\x00"$@"', *(() if docker else (b"bwrap\x00",)))
    listed = await running(prefixes, lambda found: sum(c.startswith(b"sleep\x00") for c, _, _ in found) == 2)
    found = [(cmd.split(b"\0")[0], groups) for cmd, _, groups in listed]
    await task
    assert len([c for c, _ in found if c == b"sleep"]) == 2 and (docker or any(c == b"bwrap" for c, _ in found))
    for cmd, groups in found:
        memory = [line for line in groups.splitlines() if ":memory:" in line or line.startswith("0::")]
        assert any(("/docker/" if docker else "/shou-") in line for line in memory), (cmd, groups)


# Past its allowance, each program below waits (longer than its timeout) before it would go on: only the
# watcher can stop it in time, however fast or slow the machine writes. (Writing on without a pause, a busy
# machine let it finish before the watcher's next look: the watcher bounds, it does not forbid; bench/ and
# sandbox/quota.py say by how much.)
_THEN_WAIT = "sleep 600"


async def test_disk_allowance_stops_a_run_that_fills_the_disk(backend: str, workspace: Path) -> None:
    with own_file_system(workspace):
        box = make(backend, workspace, Limits(timeout=60, disk_mb=64))
        try:
            r = await box.run(["sh", "-c", "write() { dd if=/dev/zero of=big$1 bs=1M count=40 status=none; }; "
                                           f"write 1; write 2; {_THEN_WAIT}; for i in 3 4 5 6; do write $i; done; "
                                           "echo all written"])
        finally:
            release(box)
        written = sum(p.stat().st_size for p in workspace.glob("big*"))
    assert r.reason == "disk" and "64 MB disk allowance" in r.for_model(), r.for_model()
    assert "all written" not in r.stdout and written <= 80 * 2**20
    assert r.duration < 60, "its time limit stopped it, not the watcher (which names the allowance all the same)"


async def test_inode_allowance_stops_a_run_that_makes_files(backend: str, workspace: Path) -> None:
    with own_file_system(workspace):
        box = make(backend, workspace, Limits(timeout=60, inodes=2000))
        try:
            r = await box.run(["python3", "-c", "import subprocess\nfor i in range(3000): open(f'f{i}', 'w').close()\n"
                                                f"subprocess.run({_THEN_WAIT.split()!r})\n"
                                                "for i in range(3000, 20000): open(f'f{i}', 'w').close()\n"
                                                "print('made all')"])
        finally:
            release(box)
        assert r.reason == "disk" and "files" in r.note and "made all" not in r.stdout
        assert len(list(workspace.glob("f*"))) <= 3000
        assert r.duration < 60, "its time limit stopped it, not the watcher"
