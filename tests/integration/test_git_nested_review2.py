"""Red-team review 48b of the repositories a program makes (scripts in attack2/): on every backend, by hand
where git is needed inside (the Docker image has none). The person's git runs on the host afterwards (clean
HOME, no system config, every folder trusted) and must run nothing; the person's files stay byte- and
mode-identical; the agent's own work stays; an error is a note naming what was not disarmed, never a traceback.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shou.sandbox.base import ExecResult, Limits

from .test_git_nested import host_git, run_git_everyway
from .test_git_nested_attacks import laid
from .test_sandbox_privileges import CONTAINMENT, make, release

BUBBLEWRAP = ["bubblewrap", "bubblewrap-per-call"]


async def call(backend: str, workspace: Path, program: str, setup: str = "") -> tuple[ExecResult, ExecResult]:
    """`setup` run by the person on the host, then `program` in the sandbox, then a second call."""
    if setup:
        subprocess.run(["bash", "-c", setup], cwd=workspace, check=True)
    box = make(backend, workspace, Limits(timeout=120))
    try:
        first = await box.run(["bash", "-c", program])
        second = await box.run(["true"])  # and the next call works (no error left behind)
    finally:
        release(box)
    return first, second


def home_of(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return home


@pytest.mark.parametrize("backend", CONTAINMENT)
async def test_the_agents_refs_next_to_a_persons_objects_stay(backend: str, workspace: Path) -> None:
    # h1_unmark_agent_refs.sh
    r, _ = await call(backend, workspace, "mkdir -p game/refs && echo 'important agent work' > game/refs/notes.md "
                      "&& echo hi > game/HEAD.md", "mkdir -p game/objects && echo sword > game/objects/sword.txt")
    assert r.ok, r.for_model()
    assert (workspace / "game" / "refs" / "notes.md").read_text() == "important agent work\n", r.note
    assert (workspace / "game" / "objects" / "sword.txt").read_text() == "sword\n"


@pytest.mark.parametrize("backend", CONTAINMENT)
async def test_the_agents_project_with_objects_refs_config_and_hooks_stays(backend: str, workspace: Path) -> None:
    # h2_disarm_agent_project.sh
    program = ("mkdir -p app/objects app/refs app/hooks app2/objects app2/refs && echo x > app/objects/a && "
               "echo y > app/refs/b && printf 'port: 8080\\nhost: localhost\\n' > app/config && "
               "printf '#!/bin/sh\\necho build\\n' > app/hooks/build.sh && chmod +x app/hooks/build.sh && "
               "printf '[server]\\n\\tport = 8080\\n\\tcmd = ./run\\n' > app2/config")
    r, _ = await call(backend, workspace, program)
    assert r.ok and not r.note, r.for_model()
    assert (workspace / "app" / "config").read_text() == "port: 8080\nhost: localhost\n"
    assert (workspace / "app2" / "config").read_text() == "[server]\n\tport = 8080\n\tcmd = ./run\n"
    assert (workspace / "app" / "hooks" / "build.sh").stat().st_mode & 0o111
    assert (workspace / "app" / "refs" / "b").read_text() == "y\n"


@pytest.mark.parametrize("backend", CONTAINMENT)
async def test_a_persons_folder_with_objects_and_refs_is_neither_filled_nor_pinned(backend: str,
                                                                                  workspace: Path) -> None:
    # h3_pin_creates_in_person_folder.sh
    r, _ = await call(backend, workspace, "echo 'key: v' > data/config && echo 'b: 2' > site/config/app.yml && "
                      "mkdir data/hooks && echo done",
                      "mkdir -p data/objects data/refs site/objects site/refs site/config && "
                      "echo 'a: 1' > site/config/app.yml")
    assert r.ok and "done" in r.stdout, r.for_model()
    assert (workspace / "data" / "config").read_text() == "key: v\n"
    assert (workspace / "site" / "config" / "app.yml").read_text() == "b: 2\n"


@pytest.mark.parametrize("backend", CONTAINMENT)
async def test_a_hook_hard_linked_to_the_persons_script_leaves_its_mode(backend: str, workspace: Path,
                                                                       tmp_path: Path) -> None:
    # h4_hook_hardlink_chmod.sh (by hand: Docker's image has no git)
    marker = tmp_path / "PWNED"
    script = workspace / "scripts" / "deploy.sh"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    r, _ = await call(backend, workspace, laid("junk/.git").replace("M", str(marker)) +
                      " && mkdir -p junk/.git/hooks && ln scripts/deploy.sh junk/.git/hooks/pre-commit")
    assert r.ok, r.for_model()
    assert script.stat().st_mode & 0o7777 == 0o755 and script.read_text() == f"#!/bin/sh\ntouch {marker}\n"
    run_git_everyway(workspace / "junk", home_of(tmp_path))
    assert not marker.exists(), r.note


@pytest.mark.parametrize("backend", BUBBLEWRAP)
async def test_a_submodule_folder_planted_in_a_store_without_head(backend: str, workspace: Path,
                                                                  tmp_path: Path) -> None:
    # s1_submodule_gitdir_in_skipped_store.sh: git runs inside the sandbox (bubblewrap binds the host's)
    marker = tmp_path / "PWNED"
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    subprocess.run(["git", "-C", str(workspace), "-c", "user.name=p", "-c", "user.email=p@p", "commit", "-q",
                    "--allow-empty", "-m", "init"], check=True)
    config = (workspace / ".git" / "config").read_bytes()
    script = (Path(__file__).parent / "git_store_submodule.sh").read_text().replace("MARK", str(marker))
    r, _ = await call(backend, workspace, script)
    assert r.ok and "planted" in r.stdout, r.for_model()
    assert (workspace / ".git" / "config").read_bytes() == config  # (the host's submodule update writes it)
    home = home_of(tmp_path)
    run_git_everyway(workspace, home)
    host_git(workspace, home, "-c", "protocol.file.allow=always", "submodule", "update", "--init")
    run_git_everyway(workspace / "z", home)
    assert not marker.exists(), r.note


CHAIN = ("python3 -c \"import os\nos.makedirs('chain/d')\nprev = 'd'\nfor i in range(3000):\n"
         "    os.symlink(prev, f'chain/l{i}'); prev = f'l{i}'\nos.symlink(f'chain/{prev}', '.git')\"")


@pytest.mark.parametrize("backend", CONTAINMENT)
async def test_a_link_chain_is_a_note_not_a_traceback(backend: str, workspace: Path, tmp_path: Path) -> None:
    # r1_symlink_chain_traceback.sh
    marker = tmp_path / "PWNED"
    r, again = await call(backend, workspace, CHAIN + " && " + laid("evil/.git").replace("M", str(marker)))
    assert r.ok and again.ok, (r.for_model(), again.for_model())
    assert "could not read .git" in (r.note or ""), r.note
    run_git_everyway(workspace / "evil", home_of(tmp_path))
    assert not marker.exists(), r.note


DEEP = ("python3 -c \"import os\nfor t in 'abc':\n    os.makedirs(t + '/.git/objects'); os.makedirs(t + '/.git/refs')\n"
        "    open(t + '/.git/HEAD', 'w').write('ref: refs/heads/m\\n')\n    top = os.getcwd()\n"
        "    os.makedirs(t + '/.git/config'); os.chdir(t + '/.git/config')\n"
        "    for i in range(1500): os.mkdir('d'); os.chdir('d')\n    os.chdir(top)\"")


@pytest.mark.parametrize("backend", CONTAINMENT)
async def test_a_config_too_deep_to_remove_is_named_and_the_others_disarmed(backend: str, deep_tmp: Path,
                                                                       tmp_path: Path) -> None:
    # r2_rmtree_recursion_skips_disarm.sh
    workspace = deep_tmp / "ws"
    workspace.mkdir()
    marker = tmp_path / "PWNED"
    r, again = await call(backend, workspace, DEEP + " && " + laid("m/.git").replace("M", str(marker)))
    assert r.ok and again.ok, (r.for_model(), again.for_model())
    assert "could not be disarmed" in (r.note or "") and "a/.git" in (r.note or ""), r.note
    home = home_of(tmp_path)
    for name in ("m", "a"):
        run_git_everyway(workspace / name, home)
    assert not marker.exists(), r.note


@pytest.mark.parametrize("backend", CONTAINMENT)
async def test_the_config_files_cleaned_in_one_call_are_bounded(backend: str, workspace: Path,
                                                               tmp_path: Path) -> None:
    # g1_worktree_configs_hang.sh (1,000 here)
    marker = tmp_path / "PWNED"
    program = (laid("r/.git").replace("M", str(marker)) + " && cd r/.git && for i in $(seq 1000); do mkdir -p "
               "worktrees/w$i && printf '[core]\\n\\tpager = x\\n' > worktrees/w$i/config.worktree; done")
    start = time.monotonic()
    r, _ = await call(backend, workspace, program)
    assert time.monotonic() - start < 30 and r.ok, r.for_model()
    assert "unread" in (r.note or ""), r.note
    left = [p for p in (workspace / "r" / ".git" / "worktrees").glob("*/config.worktree") if "pager" in p.read_text()]
    assert not left and "fsmonitor" not in (workspace / "r" / ".git" / "config").read_text()


async def test_a_renamed_persons_repository_is_put_back_by_the_interpreters_cell(workspace: Path,
                                                                                 tmp_path: Path) -> None:
    # e3_stateful_rename_person_repo.py
    from shou.sandbox.stateful import StatefulPython

    marker = tmp_path / "PWNED"
    box = make("bubblewrap", workspace, Limits(timeout=60))
    kernel = StatefulPython(box)  # type: ignore[arg-type]
    try:
        await kernel.execute("x = 1")
        subprocess.run(["git", "init", "-q", str(workspace / "proj")], check=True)  # the person, meanwhile
        config = (workspace / "proj" / ".git" / "config").read_bytes()
        r = await kernel.execute(f"import os\nos.rename('proj', 'proj2')\nwith open('proj2/.git/config', 'a') as f:\n"
                                 f"    f.write('[core]\\n\\tfsmonitor = \"touch {marker}; false\"\\n')\n")
        await kernel.execute("x + 1")
    finally:
        await kernel.close()
        release(box)
    assert r.ok and "put back proj2/.git/config" in (r.note or ""), r.for_model()
    assert (workspace / "proj2" / ".git" / "config").read_bytes() == config
    run_git_everyway(workspace / "proj2", home_of(tmp_path))
    assert not marker.exists()


OWNER = """
import asyncio, sys
from pathlib import Path
from shou.sandbox.base import Limits
from shou.sandbox.bubblewrap import BubblewrapSandbox
from shou.sandbox.stateful import StatefulPython

async def main():
    kernel = StatefulPython(BubblewrapSandbox(Path(sys.argv[1]), Limits(timeout=60)))
    r = await kernel.execute("import threading, time\\nthreading.Thread(target=time.sleep, args=(600,)).start()")
    print("ready", r.ok, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def descendants(pid: int) -> set[int]:
    """Every process below `pid` now."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rpartition(")")[2].split()[1])
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        for child in [c for c, p in parents.items() if p == parent and c not in found]:
            found.add(child)
            todo.append(child)
    return found


async def test_no_sandboxed_process_outlives_the_interpreters_owner_killed(workspace: Path, tmp_path: Path) -> None:
    # A: the interpreter was frozen between cells; its owner killed, it stayed frozen (state D) for ever.
    script = tmp_path / "owner.py"
    script.write_text(OWNER)
    sandboxed: set[int] = set()
    owner = subprocess.Popen([sys.executable, str(script), str(workspace)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == "ready True"
        sandboxed = descendants(owner.pid)
        assert sandboxed
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        for _ in range(100):
            left = {p for p in sandboxed if Path(f"/proc/{p}").exists()}
            if not left:
                break
            await asyncio.sleep(0.1)
        assert not left, {p: Path(f"/proc/{p}/status").read_text().split("\n")[2] for p in left}
    finally:
        owner.kill()
        owner.wait()
        thaw(descendants(1) & sandboxed)


def thaw(pids: set[int]) -> None:
    """Thaw the cgroups of processes left frozen (the code before this fix): their pending SIGKILL then ends them."""
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            _, controllers, group = line.split(":", 2)
            target = (Path(f"/sys/fs/cgroup{group}/cgroup.freeze"), "0") if not controllers else (
                Path(f"/sys/fs/cgroup/freezer{group}/freezer.state"), "THAWED")
            if controllers in ("", "freezer"):
                try:
                    target[0].write_text(target[1])
                except OSError:
                    continue
