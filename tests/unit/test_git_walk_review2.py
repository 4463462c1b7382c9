"""The second red-team review of the repositories a program makes (scripts h1-h4, s1, r1, r2, g1, e3), without a
sandbox: what the walk took for a repository that git does not (and the harm shou then did to the person's
files or the agent's work), what it skipped that git uses, errors that ended the tidy, and unbounded work."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from shou.git_cells import Tidy
from shou.git_protect import protect, remove_planted
from shou.git_walk import scan

from .test_git_walk import ARMED, armed, deep, lay_out

GIT = shutil.which("git")
pytestmark = pytest.mark.skipif(GIT is None, reason="needs the host's git")


def tree(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every entry under `folder`: its mode and (a file's) bytes."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            st = path.lstat()
            found[str(path.relative_to(folder))] = (st.st_mode, path.read_bytes() if path.is_file() else b"")
    return found


def test_a_folder_with_objects_and_refs_is_no_repository_and_the_agents_refs_stay(tmp_path: Path) -> None:
    # h1: the agent adds refs/ next to a person's objects/: it was removed with its content
    ws = tmp_path / "ws"
    (ws / "game" / "objects").mkdir(parents=True)
    (ws / "game" / "objects" / "sword.txt").write_text("sword")
    protected = protect(ws)
    (ws / "game" / "refs").mkdir()
    (ws / "game" / "refs" / "notes.md").write_text("important agent work")
    (ws / "game" / "HEAD.md").write_text("hi")
    note = remove_planted(ws, protected)
    assert (ws / "game" / "refs" / "notes.md").read_text() == "important agent work", note
    assert "game" not in scan(ws).dirs


def test_a_new_project_with_objects_refs_config_and_hooks_is_left_as_written(tmp_path: Path) -> None:
    # h2: its YAML/INI config was rewritten or deleted and its hooks/build.sh made not executable
    ws = tmp_path / "ws"
    ws.mkdir()
    protected = protect(ws)
    for name in ("app/objects", "app/refs", "app/hooks", "app2/objects", "app2/refs"):
        (ws / name).mkdir(parents=True)
    (ws / "app" / "config").write_text("port: 8080\nhost: localhost\n")
    (ws / "app" / "hooks" / "build.sh").write_text("#!/bin/sh\necho build\n")
    (ws / "app" / "hooks" / "build.sh").chmod(0o755)
    (ws / "app2" / "config").write_text("[server]\n\tport = 8080\n\tcmd = ./run\n")
    made = tree(ws)
    note = remove_planted(ws, protected)
    assert tree(ws) == made and note == "", note


def test_pinning_makes_nothing_in_a_folder_git_takes_for_no_repository(tmp_path: Path) -> None:
    # h3: config and hooks/ were made in the person's data/, and their site/config/ folder bound read-only
    ws = tmp_path / "ws"
    for name in ("data/objects", "data/refs", "site/objects", "site/refs", "site/config"):
        (ws / name).mkdir(parents=True)
    (ws / "site" / "config" / "app.yml").write_text("a: 1\n")
    subprocess.run(["git", "init", "-q", str(ws / "proj")], check=True)
    os.unlink(ws / "proj" / ".git" / "config")
    shutil.rmtree(ws / "proj" / ".git" / "hooks")
    before = tree(ws / "data"), tree(ws / "site")
    protected = protect(ws)
    assert (tree(ws / "data"), tree(ws / "site")) == before
    assert not any(p.startswith(("data", "site")) for p in protected.read_only), protected.read_only
    # a `.git` folder still gets them (a HEAD there: git takes it for a repository)
    assert (ws / "proj" / ".git" / "config").exists() and (ws / "proj" / ".git" / "hooks").is_dir()


def test_a_hook_that_is_another_name_of_the_persons_script_is_unlinked(tmp_path: Path) -> None:
    # h4: the person's scripts/deploy.sh lost its execute bit
    ws = tmp_path / "ws"
    (ws / "scripts").mkdir(parents=True)
    script = ws / "scripts" / "deploy.sh"
    script.write_text("#!/bin/sh\necho deploy\n")
    script.chmod(0o755)
    protected = protect(ws)
    subprocess.run(["git", "init", "-q", str(ws / "junk")], check=True)
    os.link(script, ws / "junk" / ".git" / "hooks" / "pre-commit")
    note = remove_planted(ws, protected)
    assert script.stat().st_mode & 0o777 == 0o755 and script.read_text() == "#!/bin/sh\necho deploy\n"
    assert not (ws / "junk" / ".git" / "hooks" / "pre-commit").exists(), note


def test_a_repository_in_a_store_of_a_folder_without_head_is_found(tmp_path: Path) -> None:
    # s1: `.git/modules/lib` (objects, refs, no HEAD) had its info/ skipped: an armed repository there
    ws = tmp_path / "ws"
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    protected = protect(ws)
    (ws / ".git" / "modules" / "lib" / "objects").mkdir(parents=True)
    (ws / ".git" / "modules" / "lib" / "refs").mkdir()
    lay_out(ws / ".git" / "modules" / "lib" / "info" / "z")
    # the top repository's stores stay out of the walk: it stays cheap
    for i in range(50):
        (ws / ".git" / "objects" / f"{i:02x}").mkdir()
    walk = scan(ws)
    assert ".git/modules/lib/info/z" in walk.dirs
    assert not any(n.startswith(".git/objects/") for n in walk.dirs) and walk.entries < 60, walk.entries
    note = remove_planted(ws, protected)
    assert not armed(ws / ".git" / "modules" / "lib" / "info" / "z"), note


def test_a_link_chain_past_the_kernels_bound_is_unreadable_not_a_traceback(tmp_path: Path) -> None:
    # r1: os.path.realpath recursed through 3,000 links: RecursionError out of the walk, then out of every protect
    from shou.git_walk import resolve  # new with this fix

    ws = tmp_path / "ws"
    (ws / "chain" / "d").mkdir(parents=True)
    prev = "d"
    for i in range(3000):
        os.symlink(prev, ws / "chain" / f"l{i}")
        prev = f"l{i}"
    with pytest.raises(OSError):
        resolve(os.fsencode(ws / "chain" / prev))
    assert resolve(os.fsencode(ws / "chain" / "l30")) == os.fsencode(ws / "chain" / "d")
    protected = protect(ws)
    os.symlink(f"chain/{prev}", ws / ".git")
    lay_out(ws / "evil" / ".git")
    note = remove_planted(ws, protected)
    assert not armed(ws / "evil" / ".git"), note
    assert "incomplete" in note and ".git" in note, note
    protect(ws)  # and the next call is prepared


def test_a_config_too_deep_to_remove_is_named_and_the_rest_disarmed(tmp_path: Path, deep_tmp: Path) -> None:
    # r2: shutil.rmtree recursed through a config folder 1,500 deep: the tidy died, `m` stayed armed
    ws = deep_tmp / "ws"
    ws.mkdir()
    protected = protect(ws)
    for name in "abc":
        lay_out(ws / name / ".git")
        os.unlink(ws / name / ".git" / "config")
        deep(ws / name / ".git" / "config", 1500)
    lay_out(ws / "m" / ".git")
    note = remove_planted(ws, protected)
    assert not armed(ws / "m" / ".git"), note
    assert "could not be disarmed" in note and "a/.git" in note, note
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
    for name in "abcm":  # git cannot read a config that is a folder: it runs nothing
        subprocess.run(["git", "-c", "safe.directory=*", "-C", str(ws / name), "status"], env=env,
                       capture_output=True, check=False, cwd=tmp_path)
    assert not (tmp_path / "PWNED").exists() and not (ws / "m" / "PWNED").exists()


def test_the_config_files_read_in_one_call_are_bounded(tmp_path: Path) -> None:
    # g1: 2,000 worktrees/*/config.worktree took 11 s, two runs of git each
    ws = tmp_path / "ws"
    ws.mkdir()
    protected = protect(ws)
    repo = lay_out(ws / "r" / ".git")
    for i in range(1000):
        (repo / "worktrees" / f"w{i}").mkdir(parents=True)
        (repo / "worktrees" / f"w{i}" / "config.worktree").write_text("[core]\n\tpager = x\n")
    start = time.monotonic()
    note = remove_planted(ws, protected)
    assert time.monotonic() - start < 8, note
    assert not any("pager" in p.read_text() for p in repo.glob("worktrees/*/config.worktree")), note
    assert "unread" in note and not armed(repo), note


def test_a_commondir_naming_no_persons_repository_is_removed_but_a_worktrees_stays(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    subprocess.run(["git", "init", "-q", str(ws / "proj")], check=True)
    subprocess.run(["git", "-C", str(ws / "proj"), "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q",
                    "--allow-empty", "-m", "x"], check=True)
    (ws / "src" / "objects").mkdir(parents=True)
    (ws / "src" / "refs").mkdir()
    protected = protect(ws)
    (ws / "src" / "config").write_text(ARMED)
    (ws / "w2").mkdir()
    (ws / "w2" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / "w2" / "commondir").write_text("../src\n")
    subprocess.run(["git", "-C", str(ws / "proj"), "worktree", "add", "-q", str(ws / "wt")], check=True)
    note = remove_planted(ws, protected)
    assert not (ws / "w2" / "commondir").exists(), note
    assert (ws / "proj" / ".git" / "worktrees" / "wt" / "commondir").exists(), note
    done = subprocess.run(["git", "-C", str(ws / "wt"), "status", "--short"], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr


def test_a_cell_puts_back_a_renamed_repository_of_the_persons(tmp_path: Path) -> None:
    # e3: the put-back was kept by path: a rename kept the program's config
    ws = tmp_path / "ws"
    ws.mkdir()
    tidy = Tidy(ws, protect(ws))
    subprocess.run(["git", "init", "-q", str(ws / "proj")], check=True)  # the person, after the start
    person = (ws / "proj" / ".git" / "config").read_bytes()
    tidy.begin()
    os.rename(ws / "proj", ws / "proj2")
    with open(ws / "proj2" / ".git" / "config", "a") as f:
        f.write('[core]\n\tfsmonitor = "touch PWNED"\n')
    note = tidy()
    assert (ws / "proj2" / ".git" / "config").read_bytes() == person, note
    assert "put back proj2/.git/config" in note, note


def test_a_repository_the_program_made_stays_its_own_in_later_cells(tmp_path: Path) -> None:
    # A thread re-arming, between cells, a repository an earlier cell made: disarmed at the next cell's end.
    ws = tmp_path / "ws"
    ws.mkdir()
    tidy = Tidy(ws, protect(ws))
    tidy.begin()
    lay_out(ws / "sub" / ".git")
    assert "sub/.git" in tidy()
    (ws / "sub" / ".git" / "config").write_text(ARMED)  # between cells
    tidy.begin()
    note = tidy()
    assert not armed(ws / "sub" / ".git"), note
