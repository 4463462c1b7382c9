"""Warm sandboxes: calls share one long-lived sandbox (bubblewrap) or container (Docker), yet nothing of one
call is left to the next but the workspace; it is replaced when it dies or the protected paths change, a
parallel call gets a sandbox of its own, and no container outlives its sandbox or its process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from shou.sandbox.base import Limits
from shou.sandbox.bubblewrap import BubblewrapSandbox

from .test_sandbox import containers, docker_sandbox, warm_bwrap_pids, warm_processes

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Docker sandbox tests run on Linux")


@pytest.fixture
def sb(workspace: Path) -> Iterator:
    box = docker_sandbox(workspace, Limits(timeout=20))
    yield box
    box.close()  # type: ignore[attr-defined]
    assert containers() == []


@pytest.fixture
def bwrap(workspace: Path) -> Iterator[BubblewrapSandbox]:
    box = BubblewrapSandbox(workspace, Limits(timeout=20))
    yield box
    box.close()


def bwrap_id(box: BubblewrapSandbox) -> int | None:
    """The warm bwrap's pid, while there is one."""
    return box.warm_slot.warm.proc.pid if box.warm_slot.warm is not None else None


LEAVE = ("echo secret > /tmp/left; mkdir -p /tmp/d/e; chmod 000 /tmp/d; echo shm > /dev/shm/left; "
         "python3 -c \"import ctypes; libc = ctypes.CDLL(None); print(libc.shmget(4242, 4096, 0o1666))\"; "
         "setsid sleep 1007 & echo launched")
LOOK = ("ls -A /tmp /dev/shm /code; cat /proc/sysvipc/shm | wc -l; ps -eo args | grep -c '[s]leep 1007'; "
        "ls /run/shou; echo done")


async def test_calls_share_a_container_but_no_state_but_the_workspace(sb, workspace: Path) -> None:
    first = await sb.run(["sh", "-c", LEAVE + "; echo kept > /workspace/kept"])
    assert first.ok and "launched" in first.stdout, first.for_model()
    warm = sb.warm_id
    assert warm is not None
    r = await sb.run(["sh", "-c", LOOK])
    assert sb.warm_id == warm  # the same container
    # /tmp and /dev/shm empty, one header line of /proc/sysvipc/shm, no sleeper, no executor socket.
    assert r.stdout.split() == ["/code:", "/dev/shm:", "/tmp:", "1", "0", "done"], r.for_model()
    assert (workspace / "kept").read_text() == "kept\n"
    assert len(warm_processes(warm)) == 2  # init and the executor


async def test_a_container_whose_executor_is_killed_is_replaced(sb) -> None:
    await sb.run(["true"])
    first = sb.warm_id
    r = await sb.run(["sh", "-c", "kill -9 -1; sleep 5"])  # every process of its uid: the executor too
    assert r.reason in ("timeout", "killed", "exit")
    again = await sb.run(["sh", "-c", "echo back"])
    assert again.ok and again.stdout == "back\n", again.for_model()
    assert sb.warm_id not in (None, first)
    assert [c for c in containers() if not sb.warm_id.startswith(c)] == []  # the dead one is gone


async def test_new_protected_paths_get_a_new_container(sb, workspace: Path) -> None:
    await sb.run(["true"])
    first = sb.warm_id
    (workspace / "shou.toml").write_text("model = 'x'\n")
    r = await sb.run(["sh", "-c", "echo changed > shou.toml"])
    assert sb.warm_id != first
    assert "Read-only file system" in r.stderr or "Permission denied" in r.stderr, r.for_model()
    assert (workspace / "shou.toml").read_text() == "model = 'x'\n"


async def test_a_parallel_call_gets_a_container_of_its_own(sb) -> None:
    await sb.run(["true"])
    a, b = await asyncio.gather(sb.run(["sh", "-c", "sleep 1; echo a"]), sb.run(["sh", "-c", "echo b"]))
    assert (a.stdout, b.stdout) == ("a\n", "b\n"), (a.for_model(), b.for_model())


async def test_the_time_limit_kills_the_whole_call_and_the_container_serves_on(sb) -> None:
    r = await sb.run(["sh", "-c", "setsid sleep 1008 & sleep 1009"], limits=sb.limits.with_(timeout=1))
    assert r.reason == "timeout" and r.exit_code is None
    after = await sb.run(["sh", "-c", "ps -eo args | grep -c '[s]leep 100'; echo ok"])
    assert after.stdout.split() == ["0", "ok"], after.for_model()


def test_no_container_outlives_the_process(workspace: Path) -> None:
    docker_sandbox(workspace, Limits())  # skips without an engine or the image
    script = textwrap.dedent(f"""
        import asyncio
        from shou.sandbox.base import Limits
        from shou.sandbox.docker import DEFAULT_IMAGES, DockerSandbox
        sb = DockerSandbox({str(workspace)!r}, Limits(), images=dict.fromkeys(DEFAULT_IMAGES, "shou-sandbox:local"))
        print(asyncio.run(sb.run(["echo", "hi"])).stdout, sb.warm_id)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("hi"), done.stderr
    assert containers() == []  # removed at exit, without close()


def test_a_killed_process_leaves_no_container(workspace: Path) -> None:
    docker_sandbox(workspace, Limits())
    script = textwrap.dedent(f"""
        import asyncio, os, signal
        from shou.sandbox.base import Limits
        from shou.sandbox.docker import DEFAULT_IMAGES, DockerSandbox
        sb = DockerSandbox({str(workspace)!r}, Limits(), images=dict.fromkeys(DEFAULT_IMAGES, "shou-sandbox:local"))
        asyncio.run(sb.run(["true"]))
        print(sb.warm_id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    warm = done.stdout.strip()
    assert warm, done.stderr
    # The executor sees its connection close and exits; the engine removes the container (auto-remove).
    docker = pytest.importorskip("docker")
    client = docker.from_env()
    try:
        client.api.wait(warm, timeout=60, condition="removed")
    except docker.errors.NotFound:
        pass  # removed already
    finally:
        client.close()
    assert containers() == []


async def test_bubblewrap_calls_share_a_sandbox_but_no_state_but_the_workspace(bwrap, workspace: Path) -> None:
    first = await bwrap.run(["sh", "-c", LEAVE + "; echo kept > /workspace/kept; touch /dev/mqueue/q"],
                            files={"main.py": b"print(1)"})
    assert first.ok and "launched" in first.stdout, first.for_model()
    warm = bwrap_id(bwrap)
    assert warm is not None
    r = await bwrap.run(["sh", "-c", "ls -A /dev/mqueue; " + LOOK.replace("ls /run/shou; ", "")])
    assert bwrap_id(bwrap) == warm  # the same sandbox
    assert r.stdout.split() == ["/code:", "/dev/shm:", "/tmp:", "1", "0", "done"], r.for_model()
    assert (workspace / "kept").read_text() == "kept\n"
    assert len(warm_bwrap_pids(bwrap)) == 2  # bwrap and the executor, nothing else of the sandbox uid


async def test_the_program_cannot_kill_the_bubblewrap_executor_and_a_dead_one_is_replaced(bwrap) -> None:
    r = await bwrap.run(["sh", "-c", "kill -9 1; kill -9 -1; echo alive"])
    assert r.ok and r.stdout == "alive\n", r.for_model()  # PID 1 ignores them; kill -1 spares the caller
    first = bwrap_id(bwrap)
    executor = max(warm_bwrap_pids(bwrap))  # bwrap's child, the executor
    os.kill(executor, signal.SIGKILL)
    await bwrap.warm_slot.warm.proc.wait()  # bwrap ends with its PID 1
    again = await bwrap.run(["sh", "-c", "echo back"])
    assert again.ok and again.stdout == "back\n", again.for_model()
    assert bwrap_id(bwrap) not in (None, first)


async def test_bubblewrap_calls_with_other_limits_get_a_sandbox_of_their_own(bwrap) -> None:
    await bwrap.run(["true"])
    warm = bwrap_id(bwrap)
    r = await bwrap.run(["sh", "-c", "ulimit -v; cat /proc/self/status | grep -c NSpid"],
                        limits=bwrap.limits.with_(memory_mb=128))
    assert r.ok, r.for_model()
    assert bwrap_id(bwrap) == warm  # the warm one stays for calls with the sandbox's own limits


KEYS = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
if {add}:
    print(libc.syscall(248, b"user", b"left", b"secret", 6, ctypes.c_int(-4)) > 0)  # add_key to @u
print(libc.syscall(250, 11, ctypes.c_int(-4), None, 0))  # KEYCTL_READ @u: bytes of key ids it holds
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="system call numbers of x86_64")
async def test_a_key_left_in_the_user_keyring_is_gone_for_the_next_call(bwrap) -> None:
    first = await bwrap.run_code("python", KEYS.format(add=True))
    assert first.stdout.split() == ["True", "4"], first.for_model()  # one key id, 4 bytes
    second = await bwrap.run_code("python", KEYS.format(add=False))
    assert second.stdout.split() == ["0"], second.for_model()


DEEP_TMP = "python3 -c \"import os\nos.chdir('/tmp')\nfor i in range(1500): os.mkdir('d'); os.chdir('d')\"; " \
           "echo left > /tmp/left"


@pytest.mark.parametrize("backend", ["docker", "bubblewrap"])
async def test_a_tree_thousands_deep_in_tmp_is_removed_and_the_next_call_runs(backend: str, request) -> None:
    # The executor's tidy recursed once a level: at 1,500 it died after the call's end, and the next call was
    # sent to nobody (reported killed, though it never ran).
    box = request.getfixturevalue("sb" if backend == "docker" else "bwrap")
    first = await box.run(["sh", "-c", DEEP_TMP])
    assert first.ok, first.for_model()
    again = await box.run(["sh", "-c", "ls -A /tmp; echo ran"])
    assert again.ok and again.stdout == "ran\n", again.for_model()


async def test_a_call_after_an_executor_that_died_in_its_tidy_is_not_lost() -> None:
    # The executor's end of the link (warm_executor.py) answers one call, then dies before saying it is ready
    # again: the next call is NotStarted (its owner runs it elsewhere), never a call reported killed.
    from shou.sandbox.quota import DiskWatch
    from shou.sandbox.warm_link import HEADER, ExecutorLink, NotStarted

    async def executor(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEADER.pack(b"r", 0))
        _, size = HEADER.unpack(await reader.readexactly(HEADER.size))
        await reader.readexactly(size)
        end = b'{"status": 0, "killed": false}'
        writer.write(HEADER.pack(b"x", len(end)) + end)
        await writer.drain()
        writer.close()  # dies in its tidy: no `r`

    left, right = __import__("socket").socketpair()
    server = asyncio.ensure_future(executor(*await asyncio.open_connection(sock=right)))
    link = ExecutorLink(*await asyncio.open_connection(sock=left), lambda: -1)
    await link.hello()
    from shou.sandbox.base import OutputCapture

    watch = DiskWatch(Path("/tmp"), 1 << 40, 10**9)
    code, reason, _ = await link.call({"argv": ["true"]}, Limits(timeout=20), watch, OutputCapture(), OutputCapture())
    assert (code, reason) == (0, "exit")
    await server
    with pytest.raises(NotStarted):
        await link.call({"argv": ["true"]}, Limits(timeout=20), watch, OutputCapture(), OutputCapture())
    assert link.dead


WIDE_TMP = "mkdir /tmp/q && cd /tmp/q && seq 1 30000 | xargs mkdir && echo made"


@pytest.mark.parametrize("backend", ["docker", "bubblewrap"])
async def test_thirty_thousand_folders_in_tmp_are_removed_before_the_next_call(backend: str, request) -> None:
    # Review 49b, B2: the tidy listed a folder again after each subfolder (quadratic): the next call waited a
    # minute for the executor's `r`, then ran in a sandbox of its own.
    box = request.getfixturevalue("sb" if backend == "docker" else "bwrap")
    first = await box.run(["sh", "-c", WIDE_TMP])
    assert first.ok and "made" in first.stdout, first.for_model()
    warm = box.warm_id if backend == "docker" else bwrap_id(box)
    again = await box.run(["sh", "-c", "ls -A /tmp; echo ran"])
    assert again.ok and again.stdout == "ran\n", again.for_model()
    assert (box.warm_id if backend == "docker" else bwrap_id(box)) == warm  # the same sandbox, not a fallback
