"""Issue 28, second red-team round: holes left in the first round of sandbox fixes.

The host's `git status` obeyed a config planted by renaming `.git` away from its read-only binds, or by
writing `.git/commondir`; a parallel Docker call swapped `shou.toml` for a symlink between shou's check and
the engine's bind; printed output spilled under `.shou/outputs` escaped the run's disk allowance; a stateful
interpreter stopped for disk was reported as out of memory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shou.sandbox.base import Limits

from .test_sandbox_privileges import BACKENDS, ROOT, make, own_file_system, release

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="both backends need Linux")

MiB = 2**20
FSMON = 'printf "[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = \\"id > $HOSTWS/pwned; false\\"\\n"'
ATTACKS = {
    # .git/config is bound read-only, but its parent .git could be renamed away (the mount moved with it).
    "rename .git": "mv .git .git-old && mkdir .git && cp -a .git-old/HEAD .git-old/objects .git-old/refs .git/ && "
                   + FSMON + " > .git/config",
    "rename .git, then a link": "mv .git .git-old; mkdir evil && cp -a .git-old/HEAD .git-old/objects .git-old/refs "
                                "evil/ && " + FSMON + " > evil/config && ln -s evil .git",
    # git reads config and hooks from the folder .git/commondir names.
    "commondir": "mkdir evil && cp -a .git/objects .git/refs evil/ && " + FSMON
                 + " > evil/config && echo ../evil > .git/commondir",
    "commondir as a link": "mkdir evil && cp -a .git/objects .git/refs evil/ && " + FSMON
                           + " > evil/config && echo ../evil > c && ln -s ../c .git/commondir",
}


def repo(root: Path) -> Path:
    root.chmod(0o755)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def host_git_status_runs_nothing(ws: Path) -> bool:
    subprocess.run(["git", "-C", str(ws), "status", "--short"], capture_output=True, timeout=60)
    return not (ws / "pwned").exists()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_host_git_obeys_no_config_planted_beside_the_binds(backend: str, attack: str, workspace: Path) -> None:
    ws = repo(workspace)
    sb = make(backend, ws, Limits(timeout=60))
    try:
        r = await sb.run(["bash", "-c", f"HOSTWS={ws}; " + ATTACKS[attack]])
        again = await sb.run(["bash", "-c", "echo x > .git/description && mkdir .git/new && echo fine"])
    finally:
        release(sb)
    assert host_git_status_runs_nothing(ws), r.for_model()
    assert again.ok and "fine" in again.stdout, again.for_model()  # .git stays writable
    if "rename" in attack:
        assert "Device or resource busy" in r.stderr, r.for_model()
    else:
        assert not os.path.lexists(ws / ".git" / "commondir")
        assert "removed .git/commondir" in r.note, r.note


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_existing_commondir_is_read_only(backend: str, workspace: Path) -> None:
    ws = repo(workspace)
    (ws / "shared").mkdir()
    (ws / ".git" / "commondir").write_text(".\n")
    sb = make(backend, ws, Limits(timeout=60))
    try:
        r = await sb.run(["bash", "-c", "echo ../evil > .git/commondir"])
    finally:
        release(sb)
    assert not r.ok and (ws / ".git" / "commondir").read_text() == ".\n", r.for_model()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_garbled_repository_pointer_is_no_traceback(backend: str, workspace: Path) -> None:
    # A NUL byte in a pointer used to be a traceback (then a refusal). Git reads it as a C string ("a", which is
    # not there): so does the walk (git_walk.pointer_readings), and the call runs.
    (workspace / ".git").write_bytes(b"gitdir: a\0b\n")
    sb = make(backend, workspace, Limits(timeout=60))
    try:
        r = await sb.run(["true"])
    finally:
        release(sb)
    assert r.ok, r.for_model()


@pytest.mark.parametrize("user", ["default", "65534:65534"])  # as root: pinned mounts; else private copies
@pytest.mark.parametrize("name", ["shou.toml", ".git/config", ".git/hooks"])
async def test_docker_binds_nothing_a_program_can_swap_for_a_link(name: str, user: str, workspace: Path) -> None:
    # The race, made deterministic: the swap lands after shou built the container's settings and before the
    # engine resolves them, which is when a parallel call of the same run could do it.
    ws = repo(workspace)
    secret = Path(workspace.parent / "host-secret")
    secret.mkdir()
    (secret / "config").write_text("TOPSECRET\n")
    (ws / "shou.toml").write_text("max_steps = 3\n")
    sb = make("docker", ws, Limits(timeout=60))
    if user != "default":
        from shou.sandbox.docker import DockerSandbox

        ws.chmod(0o777)
        sb = DockerSandbox(ws, sb.limits, images=sb.images, user=user)  # type: ignore[attr-defined]
    try:
        from shou.sandbox.docker_engine import create, discard
        from shou.workspace import state_dir

        state_dir(ws)  # as a run makes it
        client = await sb._docker_client()  # type: ignore[attr-defined]
        code = workspace.parent / "code"
        code.mkdir()
        code.chmod(0o755)
        cfg = sb.container_config(  # type: ignore[attr-defined]
            ["sh", "-c", f"cat /workspace/{name} /workspace/{name}/config 2>&1; cat /proc/self/mountinfo"],
            sb.limits, code)
        victim = ws / name
        victim.rename(ws / "moved-away")
        victim.symlink_to(secret if name == ".git/hooks" else secret / "config")
        container = await create(client, cfg)
        try:
            container.start()
            container.wait(timeout=60)
            out = container.logs(stdout=True, stderr=True).decode()
        finally:
            discard(container)
    finally:
        release(sb)
    assert "TOPSECRET" not in out, out
    mounts = {f[4]: f[5].split(",") for f in (line.split() for line in out.splitlines() if " - " in line)}
    inside = {point: opts for point, opts in mounts.items() if point.startswith("/workspace/")}
    # (The swapped name's bind may land where the link leads, inside the container: only the program's own link.)
    assert "/workspace/.git" in inside and len(inside) >= 4, mounts
    if user == "default":  # a copy is root's and plain: nothing set-id to guard against
        assert all("nosuid" in opts and "nodev" in opts for opts in inside.values()), inside
    assert all("ro" in opts for point, opts in inside.items() if point not in ("/workspace/.git", "/workspace/.shou")
               ), inside


@pytest.mark.parametrize("backend", BACKENDS)
async def test_printed_output_counts_against_the_run_allowance(backend: str, workspace: Path) -> None:
    with own_file_system(workspace, 512):
        sb = make(backend, workspace, Limits(timeout=120, disk_mb=100))
        results = []
        try:
            for _ in range(4):  # outside any agent run: the sandbox's own allowance covers all its calls
                results.append(await sb.run(["bash", "-c", "head -c 50000000 /dev/zero | tr '\\0' a; "
                                             "head -c 50000000 /dev/zero | tr '\\0' b >&2"]))
        finally:
            release(sb)
        total = sum(p.stat().st_size for p in (workspace / ".shou").rglob("*") if p.is_file())
    assert total <= 110 * MiB, f"{total / MiB:.0f} MB spilled in a run allowed 100 MB"
    assert results[-1].reason == "disk", results[-1].for_model()


@pytest.mark.skipif(not ROOT, reason="a tmpfs of its own needs root")
async def test_a_stateful_interpreter_stopped_for_disk_says_so(workspace: Path) -> None:
    from shou.sandbox.bubblewrap import BubblewrapSandbox
    from shou.sandbox.stateful import StatefulPython

    with own_file_system(workspace, 256):
        sb = make("bubblewrap", workspace, Limits(timeout=60, disk_mb=20, memory_mb=256))
        assert isinstance(sb, BubblewrapSandbox)
        kernel = StatefulPython(sb)
        try:
            r = await kernel.execute("f = open('big', 'wb')\nwhile True:\n    f.write(b'a' * 2**20); f.flush()")
        finally:
            await kernel.close()
            release(sb)
    assert r.reason == "disk", r.for_model()
    assert "disk allowance" in r.note and "out of memory" not in r.for_model()


async def test_a_stateful_interpreter_cannot_leave_a_commondir(workspace: Path) -> None:
    from shou.sandbox.stateful import StatefulPython

    ws = repo(workspace)
    sb = make("bubblewrap", ws, Limits(timeout=60))
    kernel = StatefulPython(sb)  # type: ignore[arg-type]
    try:
        r = await kernel.execute("open('.git/commondir', 'w').write('../evil\\n')")
    finally:
        await kernel.close()
        release(sb)
    assert not os.path.lexists(ws / ".git" / "commondir") and "removed .git/commondir" in r.note, r.for_model()
