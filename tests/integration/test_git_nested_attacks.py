"""Red-team review 48 of the repositories a program makes (git_walk.py, git_protect.py, git_disarm.py): each
layout below went round the walk before it (a repository it did not see, or an error that switched all
disarming off), and the host's git then ran the program's command. On every backend, by hand (the Docker
image has no git); the person's git runs on the host afterwards and must run nothing, and the person's own
repository must be byte for byte as it was.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from shou.errors import UserError
from shou.sandbox.base import Limits

from .test_git_nested import host_git, run_git_everyway
from .test_sandbox_privileges import CONTAINMENT, make, release

ARMED = "[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tfsmonitor = \\\"touch M\\\"\\n"
WORKTREE = ARMED.replace("bare = false", "bare = false\\n\\tworktree = ..")
TOP_WORKTREE = ARMED.replace("bare = false", "bare = false\\n\\tworktree = .")


def laid(folder: str, config: str = ARMED, head: str = "echo 'ref: refs/heads/main' > {f}/HEAD") -> str:
    """Shell lines that lay out a repository folder git accepts (`head`: how HEAD is made)."""
    return (f"mkdir -p '{folder}/objects' '{folder}/refs/heads' && {head.format(f=repr(folder))} && "
            f"printf '{config}' > '{folder}/config'")


LINK_HEAD = "ln -s refs/heads {f}/HEAD"
# name: (the person's repository at the top first?, the program, the folders the person runs git in)
ATTACKS: dict[str, tuple[bool, str, tuple[str, ...]]] = {
    # 1: a NUL in a pointer made the walk fail, and nothing at all was disarmed
    "nul-pointer": (False, laid("sub/.git") + " && mkdir z && printf 'gitdir: a\\000b\\n' > z/.git", ("sub",)),
    "nul-commondir": (False, laid("sub/.git") + " && printf 'a\\000b\\n' > sub/.git/commondir", ("sub",)),
    # 2: the top laid out as a bare repository: the walk stopped there
    "top-bare": (False, "echo 'ref: refs/heads/main' > HEAD && mkdir -p objects refs && " + laid("sub/.git"),
                 ("sub", ".")),
    # 3: a repository inside a folder laid out as a bare one, three levels down
    "in-bare": (False, laid("x") + " && " + laid("x/a/b/lib/.git"), ("x/a/b/lib", "x")),
    # 4: layouts git accepts that the walk did not: HEAD a link, objects and refs executable files, HEAD as
    # a folder where the other marks are; a submodule's folder with a HEAD link (named by a `.git` link to a
    # `.git` file, finding 5)
    "head-link": (False, "mkdir src && " + laid("src", WORKTREE, LINK_HEAD), ("src",)),
    "exec-files": (False, "echo 'ref: refs/heads/main' > HEAD && : > objects && : > refs && chmod +x objects refs && "
                   f"printf '{TOP_WORKTREE}' > config", (".",)),
    "module-head-link": (False, laid("sub/.git") + " && " + laid("sub/.git/modules/m", head=LINK_HEAD) +
                         " && mkdir -p sub/m && echo 'gitdir: ../.git/modules/m' > sub/m/pointer && "
                         "ln -s pointer sub/m/.git", ("sub/m", "sub")),
    # 5: pointers read otherwise than git reads them, or leading into the person's .git
    "trailing-space": (False, laid("store ", head=LINK_HEAD) + " && mkdir sub && printf 'gitdir: ../store \\n' > "
                       "sub/.git", ("sub",)),
    "crlf": (False, laid("store") + " && mkdir sub && printf 'gitdir: ../store\\r\\n' > sub/.git", ("sub",)),
    "into-dotgit": (True, laid(".git/evil ") + " && mkdir sub && printf 'gitdir: ../.git/evil \\n' > sub/.git",
                    ("sub",)),
    "non-utf8": (True, "d=$(printf '.git/ev\\377il') && mkdir -p \"$d/objects\" \"$d/refs/heads\" sub && "
                 "echo 'ref: refs/heads/main' > \"$d/HEAD\" && printf '" + ARMED + "' > \"$d/config\" && "
                 "printf 'gitdir: ../.git/ev\\377il\\n' > sub/.git", ("sub",)),
    "link-to-gitfile": (True, laid(".git/evil") + " && mkdir sub && printf 'gitdir: ../.git/evil\\n' > sub/pointer "
                        "&& ln -s pointer sub/p2 && ln -s p2 sub/.git", ("sub",)),
    # 7: modules nested 1100 deep: a RecursionError out of the walk, on this call and every later one
    "deep-modules": (False, laid("sub/.git") + " && mkdir -p sub/.git/modules/$(printf 'a/%.0s' $(seq 1100))",
                     ("sub",)),
}


def person_files(workspace: Path) -> dict[Path, bytes | int]:
    """The person's top repository's config and hooks: their bytes (and a hook's mode)."""
    found: dict[Path, bytes | int] = {workspace / ".git" / "config": (workspace / ".git" / "config").read_bytes()}
    for hook in (workspace / ".git" / "hooks").iterdir():
        found[hook] = hook.stat().st_mode
    return found


@pytest.mark.parametrize("backend", CONTAINMENT)
@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_what_the_program_lays_out_runs_nothing_on_the_host(backend: str, attack: str, deep_tmp: Path,
                                                                  tmp_path: Path) -> None:
    person_top, program, folders = ATTACKS[attack]
    workspace = deep_tmp / "ws"  # "deep-modules" makes a tree pytest's own removal cannot take
    workspace.mkdir()
    marker = tmp_path / "PWNED"
    if person_top:
        subprocess.run(["git", "init", "-q", str(workspace)], check=True)
        subprocess.run(["git", "-C", str(workspace), "config", "alias.st", "status"], check=True)
    before = person_files(workspace) if person_top else {}
    box = make(backend, workspace, Limits(timeout=120))
    try:
        r = await box.run(["bash", "-c", program.replace("M", str(marker))])
        try:
            again = await box.run(["true"])  # and the next call works (no error left behind)
        except UserError as e:  # but Docker cannot bind a name that is no UTF-8: it says so
            assert attack == "non-utf8" and backend.startswith("docker") and "not UTF-8" in str(e), e
            again = r
    finally:
        release(box)
    assert r.ok and again.ok, (r.for_model(), again.for_model())
    home = tmp_path / "home"
    home.mkdir()
    for folder in folders:
        run_git_everyway(workspace / folder, home)
    assert not marker.exists(), f"the host's git ran the program's command ({attack}, {backend}): {r.note}"
    assert (person_files(workspace) if person_top else {}) == before


@pytest.mark.parametrize("backend", CONTAINMENT)
async def test_a_top_made_to_look_bare_does_not_unpin_the_persons_repository(backend: str, workspace: Path,
                                                                             tmp_path: Path) -> None:
    proj, marker = workspace / "proj", tmp_path / "PWNED"
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    before = (proj / ".git" / "config").read_bytes()
    box = make(backend, workspace, Limits(timeout=60))
    try:
        first = await box.run(["bash", "-c", "echo 'ref: refs/heads/main' > HEAD && mkdir -p objects refs"])
        second = await box.run(["bash", "-c", f"printf '[core]\\n\\tfsmonitor = \"touch {marker}\"\\n' >> "
                                f"proj/.git/config; printf '#!/bin/sh\\ntouch {marker}\\n' > "
                                "proj/.git/hooks/pre-commit; chmod +x proj/.git/hooks/pre-commit"])
    finally:
        release(box)
    assert first.ok and "HEAD" in (first.note or ""), first.for_model()
    assert "Read-only file system" in second.stderr, second.for_model()
    assert (proj / ".git" / "config").read_bytes() == before and not (proj / ".git" / "hooks" / "pre-commit").exists()
    home = tmp_path / "home"
    home.mkdir()
    run_git_everyway(proj, home)
    assert not marker.exists()


@pytest.mark.parametrize("backend", CONTAINMENT)
async def test_a_repository_in_a_folder_named_with_a_colon(backend: str, workspace: Path, tmp_path: Path) -> None:
    # Docker's `-v source:target:mode` cannot spell it: a clear refusal, never an engine's traceback.
    marker = tmp_path / "PWNED"
    box = make(backend, workspace, Limits(timeout=60))
    try:
        first = await box.run(["bash", "-c", laid("a:b/.git").replace("M", str(marker))])
        try:
            second = await box.run(["true"])
        except UserError as e:
            assert backend.startswith("docker") and "a:b" in str(e), e
        else:
            assert second.ok, second.for_model()
    finally:
        release(box)
    assert first.ok, first.for_model()
    home = tmp_path / "home"
    home.mkdir()
    run_git_everyway(workspace / "a:b", home)
    assert not marker.exists()
    assert host_git(workspace / "a:b", home, "config", "core.fsmonitor").stdout == ""


async def test_a_repository_the_person_makes_while_an_interpreter_lives_is_theirs(workspace: Path,
                                                                                   tmp_path: Path) -> None:
    # Finding 8: each cell's tidy compared with the repositories found when the interpreter started.
    from shou.sandbox.stateful import StatefulPython

    box = make("bubblewrap", workspace, Limits(timeout=60))
    kernel = StatefulPython(box)  # type: ignore[arg-type]
    proj = workspace / "proj"
    try:
        await kernel.execute("x = 1")
        subprocess.run(["git", "init", "-q", str(proj)], check=True)  # the person, on the host, meanwhile
        for key, value in (("alias.st", "status"), ("core.hooksPath", ".githooks")):
            subprocess.run(["git", "-C", str(proj), "config", key, value], check=True)
        hook = proj / ".git" / "hooks" / "pre-commit"
        hook.write_text("#!/bin/sh\nexit 0\n")
        hook.chmod(0o755)
        config = (proj / ".git" / "config").read_bytes()
        r = await kernel.execute("x + 1")
        assert "disarmed" not in (r.note or ""), r.for_model()
        assert (proj / ".git" / "config").read_bytes() == config and hook.stat().st_mode & 0o111
        # Not pinned in this interpreter (made after it started): what the program changes there is put back.
        marker = tmp_path / "PWNED"
        changed = await kernel.execute(
            f"import os\nopen('proj/.git/config', 'a').write('[alias]\\n\\tx = !touch {marker}\\n')\n"
            f"open('proj/.git/hooks/post-checkout', 'w').write('#!/bin/sh\\ntouch {marker}\\n')\n"
            "os.chmod('proj/.git/hooks/post-checkout', 0o755)")
    finally:
        await kernel.close()
        release(box)
    assert changed.ok and "put back" in (changed.note or ""), changed.for_model()
    assert (proj / ".git" / "config").read_bytes() == config and hook.stat().st_mode & 0o111
    assert not (proj / ".git" / "hooks" / "post-checkout").stat().st_mode & 0o111
    home = tmp_path / "home"
    home.mkdir()
    run_git_everyway(proj, home)
    assert not marker.exists()


async def test_a_repository_a_thread_writes_after_the_last_cell_is_disarmed_at_close(workspace: Path,
                                                                               tmp_path: Path) -> None:
    # Finding 6: a thread of a cell wrote a repository after the cell's tidy; closing the interpreter tidied nothing.
    # The interpreter is not frozen between cells (review 48b: a frozen one outlived its killed owner), so the
    # repository exists meanwhile (the window SECURITY.md states); closing disarms it.
    import asyncio

    from shou.sandbox.stateful import StatefulPython

    marker = tmp_path / "PWNED"
    home = tmp_path / "home"
    home.mkdir()
    box = make("bubblewrap", workspace, Limits(timeout=60))
    kernel = StatefulPython(box)  # type: ignore[arg-type]
    program = laid("sub/.git").replace("M", str(marker))
    try:
        r = await kernel.execute("import threading, time, subprocess\n"
                                 "threading.Thread(target=lambda: (time.sleep(1), subprocess.run("
                                 f"['bash', '-c', {program!r}])), daemon=True).start()")
        assert r.ok, r.for_model()
        await asyncio.sleep(4)
    finally:
        await kernel.close()
        release(box)
    if (workspace / "sub").exists():
        run_git_everyway(workspace / "sub", home)
    assert not marker.exists()


@pytest.mark.parametrize("backend", CONTAINMENT)
async def test_a_commondir_naming_a_persons_folder_laid_out_as_a_common_dir(backend: str, workspace: Path,
                                                                           tmp_path: Path) -> None:
    # A worktree's folder (HEAD, commondir) whose commondir names a person's folder that has objects and refs
    # but no HEAD: git reads the config there. That folder is no repository before the call (review 48b: pinning
    # it harmed a person's folder), so the new folder's commondir, naming none of the person's, is removed.
    marker = tmp_path / "PWNED"
    for name in ("objects", "refs/heads"):
        (workspace / "src" / name).mkdir(parents=True)
    program = ("mkdir -p w2 w && echo 'ref: refs/heads/main' > w2/HEAD && echo ../src > w2/commondir && "
               "echo 'gitdir: ../w2' > w/.git; " + f"printf '{ARMED}' > src/config".replace("M", str(marker)))
    box = make(backend, workspace, Limits(timeout=60))
    try:
        r = await box.run(["bash", "-c", program])
    finally:
        release(box)
    home = tmp_path / "home"
    home.mkdir()
    run_git_everyway(workspace / "w", home)
    assert not marker.exists(), r.for_model()


def assert_git_runs_nothing(folder: Path, tmp_path: Path, marker: Path, note: str | None) -> None:
    """The host's git, run every way in `folder`, runs nothing the program put there (`marker` stays absent)."""
    home = tmp_path / "home"
    home.mkdir()
    run_git_everyway(folder, home)
    assert not marker.exists(), note


def _stopped_tree(pid: int) -> bool:
    """Whether every process below `pid` (bwrap) is stopped: the sandbox paused between cells."""
    todo, found = [pid], []
    while todo:
        here = todo.pop()
        for tid in os.listdir(f"/proc/{here}/task"):
            with contextlib.suppress(OSError):
                kids = [int(w) for w in Path(f"/proc/{here}/task/{tid}/children").read_text().split()]
                found += kids
                todo += kids
    states = []
    for child in found:
        with contextlib.suppress(OSError):
            states.append(Path(f"/proc/{child}/stat").read_bytes().rsplit(b")", 1)[1].split()[0])
    return bool(states) and all(s in (b"T", b"t") for s in states)


async def test_a_thread_left_running_makes_no_repository_between_cells(workspace: Path, tmp_path: Path) -> None:
    # Review 48, script e2: a thread a cell left running laid a repository out while no cell ran; the next
    # cell's walk took it for the person's, so it was never disarmed and the host's git ran its fsmonitor.
    import asyncio

    from shou.sandbox.stateful import StatefulPython

    marker = tmp_path / "PWNED"
    box = make("bubblewrap", workspace, Limits(timeout=60))
    kernel = StatefulPython(box)  # type: ignore[arg-type]
    program = laid("sub/.git").replace("M", str(marker))
    try:
        r = await kernel.execute(
            "import os, threading, time, subprocess\ndef later():\n"
            "    while not os.path.exists('go'): time.sleep(0.01)\n"
            f"    subprocess.run(['bash', '-c', {program!r}])\n    open('done', 'w').close()\n"
            "threading.Thread(target=later, daemon=True).start()")
        assert r.ok, r.for_model()
        (workspace / "go").touch()  # between cells
        async with asyncio.timeout(60):  # the thread has laid it out, or the sandbox is paused
            while not (workspace / "done").exists() and not _stopped_tree(kernel._handle.proc.pid):
                await asyncio.sleep(0.01)
        after = await kernel.execute("import os, time\nwhile not os.path.exists('done'): time.sleep(0.01)")
    finally:
        await kernel.close()
        release(box)
    assert_git_runs_nothing(workspace / "sub", tmp_path, marker, after.note)
    assert "disarmed" in (after.note or ""), after.for_model()


FORKER = r'''
import os, signal, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
def child():
    end = time.time() + 0.05
    while time.time() < end:
        for p in (-1, 1):
            try: os.kill(p, signal.SIGCONT)
            except Exception: pass
        if os.path.exists('go') and not os.path.exists('done'):
            try:
                os.makedirs('sub/.git/objects', exist_ok=True); os.makedirs('sub/.git/refs/heads', exist_ok=True)
                open('sub/.git/HEAD', 'w').write('ref: refs/heads/main\n')
                open('sub/.git/config', 'w').write('[core]\n\tbare = false\n\tfsmonitor = "touch MARK"\n')
                open('done', 'w').close()
            except OSError: pass
    os._exit(0)
while True:
    try:
        if os.fork() == 0: child()
    except OSError:
        time.sleep(0.001)
'''


async def test_processes_that_fork_and_continue_each_other_are_all_paused_between_cells(workspace: Path,
                                                                                          tmp_path: Path) -> None:
    # Review 49, F1: stops sent one by one raced a process forking children that send SIGCONT to all: some ran on
    # between cells and laid a repository out there, which the next cell's walk took for the person's.
    import asyncio

    from shou.sandbox.stateful import StatefulPython

    marker = tmp_path / "PWNED"
    box = make("bubblewrap", workspace, Limits(timeout=60))
    kernel = StatefulPython(box)  # type: ignore[arg-type]
    try:
        forker = FORKER.replace("MARK", str(marker))
        r = await kernel.execute(f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {forker!r}])\n"
                                 "import time; time.sleep(0.5)")
        assert r.ok, r.for_model()
        for _ in range(20):  # paused: every look finds every process stopped
            assert _stopped_tree(kernel._handle.proc.pid), r.note
            await asyncio.sleep(0.01)
        (workspace / "go").touch()
        after = await kernel.execute("import os, time\nwhile not os.path.exists('done'): time.sleep(0.01)")
        assert after.ok and _stopped_tree(kernel._handle.proc.pid), after.for_model()
    finally:
        await kernel.close()
        release(box)
    assert_git_runs_nothing(workspace / "sub", tmp_path, marker, after.note)


async def test_a_thread_running_subprocesses_is_paused_without_killing_the_interpreter(workspace: Path) -> None:
    # Review 49b, B3: a pause could catch Python's vfork child before its exec: the parent waits uninterruptibly,
    # was taken for running, and after ~48 s the interpreter was killed (its variables gone).
    from shou.sandbox.stateful import StatefulPython

    box = make("bubblewrap", workspace, Limits(timeout=60))
    kernel = StatefulPython(box)  # type: ignore[arg-type]
    try:
        first = await kernel.execute("import subprocess, threading\nkept = 42\ndef spin():\n    while True:\n"
                                     "        subprocess.run(['true'])\n"
                                     "threading.Thread(target=spin, daemon=True).start()")
        assert first.ok, first.for_model()
        for _ in range(30):
            r = await kernel.execute("print(kept)")
            assert r.ok and r.stdout.strip() == "42" and "stopped" not in (r.note or ""), r.for_model()
    finally:
        await kernel.close()
        release(box)
