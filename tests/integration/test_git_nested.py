"""Repositories other than the workspace's top one: the person's nested ones are read-only to sandboxed code
like the top one, and one the program makes is disarmed after its call (git_disarm.py), on every backend.

Review finding: sandboxed code could `git init sub && git -C sub config core.fsmonitor CMD` (or lay a
repository out by hand, or point a `.git` file at a folder of its own), and the person's git on the host,
run later in `sub` by them or their editor, ran CMD outside any sandbox.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from shou.sandbox.base import Limits

from .test_sandbox_privileges import CONTAINMENT, make, release

URL = "https://example.com/r.git"


def bad_config(marker: Path) -> str:
    """A config as a program would write it: harmless settings, and three ways to run `touch marker`."""
    return ("[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
            f'\tfsMonitor = "touch {marker}"\n\tpager = touch {marker}\n'
            f'[remote "origin"]\n\turl = {URL}\n[user]\n\tname = Mallory\n[alias]\n\tst = !touch {marker}\n')


def lay_out(folder: str, config: str) -> str:
    """Shell lines that lay a repository folder out by hand (the Docker image has no git)."""
    return (f"mkdir -p {folder}/objects {folder}/refs/heads && echo 'ref: refs/heads/main' > {folder}/HEAD && "
            f"printf '%s' '{config}' > {folder}/config")


def attacks(marker: Path) -> dict[str, tuple[str, str]]:
    """Name: (the program, the folder the person later runs git in)."""
    config = bad_config(marker)
    hook = f"printf '#!/bin/sh\\ntouch {marker}\\n' > HOOKFILE && chmod +x HOOKFILE"
    return {
        "git-init": (f"git init -q sub && git -C sub config core.fsmonitor 'touch {marker}' && "
                     f"git -C sub config alias.st '!touch {marker}' && git -C sub config remote.origin.url {URL} && "
                     "git -C sub config user.name Mallory", "sub"),
        "by-hand": (lay_out("sub/.git", config), "sub"),
        # Only harmless settings, and an include of a file that has the others.
        "include": (lay_out("sub/.git", f'[include]\n\tpath = more\n[remote "origin"]\n\turl = {URL}\n'
                            "[user]\n\tname = Mallory\n") + f" && printf '%s' '{config}' > sub/.git/more", "sub"),
        "gitdir-file": (lay_out("store", config) + " && mkdir sub && echo 'gitdir: ../store' > sub/.git", "sub"),
        "bare": (lay_out("sub", config.replace("bare = false", "bare = true")), "sub"),
        "hooks": (lay_out("sub/.git", "[core]\n\trepositoryformatversion = 0\n[user]\n\tname = Mallory\n"
                          f'[remote "origin"]\n\turl = {URL}\n') + " && mkdir sub/.git/hooks && " +
                  hook.replace("HOOKFILE", "sub/.git/hooks/pre-commit") + " && " +
                  hook.replace("HOOKFILE", "sub/.git/hooks/post-checkout"), "sub"),
        "new-top": (lay_out(".git", config), "."),
    }


def host_git(root: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The person's git on the host: no system or user config; every folder trusted as theirs (on this test
    machine the sandbox's files belong to another uid, which git would otherwise refuse to look at)."""
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-c", "safe.directory=*", "-C", str(root), *args], capture_output=True,
                          text=True, env=env, timeout=60, check=False)


def run_git_everyway(root: Path, home: Path) -> None:
    """What the person or their editor would run there: status, log, an alias, a commit (pre-commit hook),
    a checkout (post-checkout hook)."""
    host_git(root, home, "status")
    host_git(root, home, "log")
    host_git(root, home, "st")
    host_git(root, home, "-c", "user.email=a@b", "commit", "-q", "--allow-empty", "-m", "x")
    host_git(root, home, "checkout", "-q", "-b", "other")


# `git init` runs only where git is: the Docker image has none (the by-hand attacks cover Docker).
MADE = [(backend, attack) for backend in CONTAINMENT
        for attack in ("git-init", "by-hand", "include", "gitdir-file", "bare", "hooks", "new-top")
        if not (attack == "git-init" and backend.startswith("docker"))]


@pytest.mark.parametrize(("backend", "attack"), MADE)
async def test_a_repository_the_program_makes_runs_nothing_on_the_host(backend: str, attack: str,
                                                                       workspace: Path, tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    program, folder = attacks(marker)[attack]
    box = make(backend, workspace, Limits(timeout=60))
    try:
        r = await box.run(["bash", "-c", program])
    finally:
        release(box)
    assert r.ok, r.for_model()
    root, home = workspace / folder, tmp_path / "home"
    home.mkdir()
    run_git_everyway(root, home)
    assert not marker.exists(), f"the host's git ran the program's command ({attack}, {backend})"
    assert "disarmed the git repositories the program made" in (r.note or ""), r.for_model()
    # What runs nothing is kept, and git still takes the folder for a repository.
    assert host_git(root, home, "config", "remote.origin.url").stdout.strip() == URL
    assert host_git(root, home, "config", "user.name").stdout.strip() == "Mallory"
    assert host_git(root, home, "rev-parse", "--git-dir").returncode == 0
    if attack != "bare":
        assert host_git(root, home, "log", "--oneline").returncode == 0  # the commit made above
    hooks = [p for p in workspace.rglob("hooks/*") if not p.name.endswith(".sample")]
    assert all(not p.stat().st_mode & 0o111 for p in hooks if p.is_file()), hooks


NESTED_ATTACKS = [
    "printf '[core]\\n\\tfsmonitor = \"touch M\"\\n' >> proj/.git/config",
    "printf '#!/bin/sh\\ntouch M\\n' > proj/.git/hooks/pre-commit && chmod +x proj/.git/hooks/pre-commit",
    "mv proj/.git/config proj/.git/c && printf '[alias]\\n\\tst = !touch M\\n' > proj/.git/config",
    "mv proj/.git proj/.git-old && mkdir proj/.git && printf '[alias]\\n\\tst = !touch M\\n' > proj/.git/config",
    "echo x >> deep/er/lib/.git/config",
]


@pytest.mark.parametrize("backend", CONTAINMENT)
@pytest.mark.parametrize("attack", range(len(NESTED_ATTACKS)))
async def test_the_persons_nested_repositories_are_read_only(backend: str, attack: int, workspace: Path,
                                                             tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    for rel in ("proj", "deep/er/lib"):
        subprocess.run(["git", "init", "-q", str(workspace / rel)], check=True)
    # A setting of the person's that the allowlist would drop: theirs, so never touched.
    subprocess.run(["git", "-C", str(workspace / "proj"), "config", "alias.st", "status"], check=True)
    before = {p: p.read_bytes() for p in workspace.glob("**/.git/config")}
    box = make(backend, workspace, Limits(timeout=60))
    try:
        r = await box.run(["bash", "-c", NESTED_ATTACKS[attack].replace("M", str(marker))])
    finally:
        release(box)
    assert r.exit_code != 0 and ("Read-only file system" in r.stderr or "busy" in r.stderr), r.for_model()
    assert {p: p.read_bytes() for p in workspace.glob("**/.git/config")} == before
    assert not (workspace / "proj" / ".git" / "hooks" / "pre-commit").exists()
    assert "disarmed" not in (r.note or ""), r.for_model()
    home = tmp_path / "home"
    home.mkdir()
    run_git_everyway(workspace / "proj", home)
    assert not marker.exists()


@pytest.mark.parametrize("backend", CONTAINMENT)
async def test_a_persons_repository_moved_away_is_not_taken_for_new(backend: str, workspace: Path,
                                                                     tmp_path: Path) -> None:
    # The pins move with the folder: the program moves `proj` away and makes a `proj/.git` of its own.
    subprocess.run(["git", "init", "-q", str(workspace / "proj")], check=True)
    subprocess.run(["git", "-C", str(workspace / "proj"), "config", "alias.st", "status"], check=True)
    person = (workspace / "proj" / ".git" / "config").read_bytes()
    marker = tmp_path / "PWNED"
    box = make(backend, workspace, Limits(timeout=60))
    try:
        r = await box.run(["bash", "-c", "mv proj moved && " + lay_out("proj/.git", bad_config(marker))])
    finally:
        release(box)
    assert r.ok, r.for_model()
    assert (workspace / "moved" / ".git" / "config").read_bytes() == person
    assert "alias" not in (workspace / "proj" / ".git" / "config").read_text()
    assert "proj/.git (removed alias.st" in (r.note or "") and "moved/" not in (r.note or ""), r.note


@pytest.mark.parametrize("backend", CONTAINMENT)
async def test_a_linked_worktrees_config_cannot_be_planted(backend: str, workspace: Path, tmp_path: Path) -> None:
    # The person's repository in the workspace has a linked worktree outside it, reading config.worktree.
    proj, outside, marker = workspace / "proj", tmp_path / "outside", tmp_path / "PWNED"
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    for key, value in (("core.repositoryFormatVersion", "1"), ("extensions.worktreeConfig", "true")):
        subprocess.run(["git", "-C", str(proj), "config", key, value], check=True)
    subprocess.run(["git", "-C", str(proj), "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q",
                    "--allow-empty", "-m", "x"], check=True)
    subprocess.run(["git", "-C", str(proj), "worktree", "add", "-q", str(outside)], check=True)
    box = make(backend, workspace, Limits(timeout=60))
    try:
        r = await box.run(["bash", "-c", f"printf '[core]\\n\\tfsmonitor = \"touch {marker}\"\\n' > "
                                         "proj/.git/worktrees/outside/config.worktree"])
    finally:
        release(box)
    home = tmp_path / "home"
    home.mkdir()
    host_git(outside, home, "status")
    assert not marker.exists(), r.for_model()
    assert not (proj / ".git" / "worktrees" / "outside" / "config.worktree").exists()


async def test_a_repository_made_in_one_warm_call_is_read_only_in_the_next(workspace: Path, tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    box = make("bubblewrap", workspace, Limits(timeout=60))
    try:
        first = await box.run(["bash", "-c", lay_out("sub/.git", bad_config(marker))])
        second = await box.run(["bash", "-c", f"printf '[alias]\\n\\tst = !touch {marker}\\n' >> sub/.git/config"])
    finally:
        release(box)
    assert first.ok and "sub/.git (removed alias.st, core.fsmonitor, core.pager from config)" in (first.note or "")
    assert "Read-only file system" in second.stderr, second.for_model()
    assert "alias" not in (workspace / "sub" / ".git" / "config").read_text()
    assert stat.S_ISREG((workspace / "sub" / ".git" / "config").lstat().st_mode)


async def test_a_stateful_interpreters_repository_is_disarmed_after_each_cell(workspace: Path, tmp_path: Path) -> None:
    from shou.sandbox.stateful import StatefulPython

    marker = tmp_path / "PWNED"
    box = make("bubblewrap", workspace, Limits(timeout=60))
    kernel = StatefulPython(box)  # type: ignore[arg-type]
    code = (f"import subprocess\nsubprocess.run(['bash', '-c', {lay_out('sub/.git', bad_config(marker))!r}], "
            "check=True)")
    try:
        first = await kernel.execute(code)
        second = await kernel.execute(code)  # the interpreter's own sandbox: sub/.git/config is writable in it
    finally:
        await kernel.close()
        release(box)
    home = tmp_path / "home"
    home.mkdir()
    run_git_everyway(workspace / "sub", home)
    assert not marker.exists(), (first.for_model(), second.for_model())
    # The second write is into a repository the interpreter has no pins for (made after it started), which an
    # earlier cell made: it stays the program's (`git_cells.Tidy.ours`) and is disarmed again.
    assert "disarmed" in first.note and "sub/.git (removed" in second.note, (first.for_model(), second.for_model())
