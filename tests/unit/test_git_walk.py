"""The walk that finds what git could take for a repository (git_walk.py) and what `remove_planted` does with
what it finds after a call (git_protect.py), without a sandbox: red-team review 48's layouts, each of which the
walk before it missed (a repository left armed for the host's git) or failed on (nothing disarmed at all)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from shou.errors import UserError
from shou.git_cells import Tidy
from shou.git_protect import protect, remove_planted
from shou.git_walk import is_candidate, pointer_readings, scan

GIT = shutil.which("git")
pytestmark = pytest.mark.skipif(GIT is None, reason="needs the host's git")
ARMED = '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = "touch PWNED"\n'


def lay_out(folder: Path, *, head_link: bool = False, exec_files: bool = False, config: str = ARMED) -> Path:
    """A repository folder git accepts, in the plain form or one of the forms the old walk did not know."""
    folder.mkdir(parents=True, exist_ok=True)
    if exec_files:  # git checks access(X_OK) only
        for name in ("objects", "refs"):
            (folder / name).write_bytes(b"")
            (folder / name).chmod(0o755)
        (folder / "HEAD").write_text("ref: refs/heads/main\n")
    else:
        (folder / "objects").mkdir()
        (folder / "refs" / "heads").mkdir(parents=True)
        if head_link:  # git checks only that the link's text starts with refs/
            (folder / "HEAD").symlink_to("refs/heads")
        else:
            (folder / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / "config").write_text(config)
    return folder


def deep(folder: Path, levels: int) -> None:
    """`folder/a/a/...`, `levels` deep (pathlib's and os's makedirs recurse once a level)."""
    path = str(folder)
    os.mkdir(path)
    for _ in range(levels):
        path += "/a"
        os.mkdir(path)


def armed(path: Path) -> bool:
    return (path / "config").exists() and "fsmonitor" in (path / "config").read_text()


def test_a_candidate_is_head_with_objects_refs_or_commondir_of_any_type() -> None:
    assert is_candidate({"HEAD", "objects"}) and is_candidate({"HEAD", "refs"}) and is_candidate({"HEAD", "commondir"})
    # A person's folder may hold these two (a package, a game's data): a candidate only when a pointer names it.
    assert not is_candidate({"objects", "refs"})
    assert not is_candidate({"HEAD", "config"}) and not is_candidate({"objects", "config"})


def test_pointers_are_read_as_git_reads_them_and_stripped() -> None:
    assert pointer_readings(b"gitdir: a\0b\n", True) == [b"a"]  # a C string: up to the NUL
    assert pointer_readings(b"gitdir: ../store \r\n", True) == [b"../store ", b"../store"]
    assert pointer_readings(b"gitdir:x\n", True) == [b"x"]  # not git's, but taken: an over-approximation
    assert pointer_readings(b"../common\n", False) == [b"../common"]
    assert pointer_readings(b"no pointer", True) == []


LAYOUTS = {
    # finding 1: a NUL in a `.git` file made the whole walk fail (nothing disarmed)
    "nul-pointer": lambda ws: (ws / "z").mkdir() or (ws / "z" / ".git").write_bytes(b"gitdir: a\0b\n"),
    "nul-commondir": lambda ws: (lay_out(ws / "c") / "commondir").write_bytes(b"a\0b\n"),
    # findings 3 and 4
    "in-bare": lambda ws: lay_out(ws / "x") and lay_out(ws / "x" / "y" / "z" / "lib" / ".git"),
    "head-link": lambda ws: lay_out(ws / "src", head_link=True),
    "exec-files": lambda ws: lay_out(ws / "src", exec_files=True),
    "head-folder": lambda ws: lay_out(ws / "h") and shutil.rmtree(ws / "h" / "objects") is None and (
        (ws / "h" / "HEAD").unlink() or (ws / "h" / "HEAD").mkdir()),
    # finding 5
    "trailing-space": lambda ws: lay_out(ws / "store ", head_link=True) and (ws / "sub").mkdir() is None and (
        ws / "sub" / ".git").write_text("gitdir: ../store \n"),
    "crlf": lambda ws: lay_out(ws / "store") and (ws / "sub").mkdir() is None and (
        ws / "sub" / ".git").write_bytes(b"gitdir: ../store\r\n"),
    "non-utf8": lambda ws: lay_out(Path(os.fsdecode(bytes(ws / ".git") + b"/ev\xffil"))) and (
        ws / "sub").mkdir() is None and (ws / "sub" / ".git").write_bytes(b"gitdir: ../.git/ev\xffil\n"),
    "into-dotgit": lambda ws: lay_out(ws / ".git" / "objects" / "evil") and (ws / "sub").mkdir() is None and (
        ws / "sub" / ".git").write_text("gitdir: ../.git/objects/evil\n"),
    "link-to-gitfile": lambda ws: lay_out(ws / ".git" / "evil") and (ws / "sub").mkdir() is None and (
        ws / "sub" / "pointer").write_text("gitdir: ../.git/evil\n") and (
        (ws / "sub" / "p2").symlink_to("pointer") or (ws / "sub" / ".git").symlink_to("p2")),
    "link-chain-to-folder": lambda ws: lay_out(ws / "deep" / "store") and (ws / "sub").mkdir() is None and (
        (ws / "sub" / "a").symlink_to("../deep/store") or (ws / "sub" / ".git").symlink_to("a")),
    # finding 7
    "deep-modules": lambda ws: lay_out(ws / "sub" / ".git") and deep(ws / "sub" / ".git" / "modules", 1100),
}
FOUND = {"nul-pointer": "armed/.git", "nul-commondir": "c", "in-bare": "x/y/z/lib/.git", "head-link": "src",
         "exec-files": "src", "head-folder": "h", "trailing-space": "store ", "crlf": "store",
         "non-utf8": os.fsdecode(b".git/ev\xffil"), "into-dotgit": ".git/objects/evil", "link-to-gitfile": ".git/evil",
         "link-chain-to-folder": "deep/store", "deep-modules": "sub/.git"}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_repository_the_program_lays_out_is_found_and_disarmed(layout: str, deep_tmp: Path) -> None:
    ws = deep_tmp / "ws"
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / "src").mkdir()  # a folder of the person's, the program lays a repository out in
    protected = protect(ws)
    lay_out(ws / "armed" / ".git")  # a plain one too: one error must not stop the rest
    LAYOUTS[layout](ws)
    want = FOUND[layout]
    assert want in scan(ws).dirs
    note = remove_planted(ws, protected)
    folder = ws / want
    # disarmed (a new folder), or no more a repository (a folder of the person's: its new HEAD... removed)
    assert not armed(folder) or not (folder / "HEAD").exists(), note
    assert not armed(ws / "armed" / ".git"), note


def test_the_top_made_to_look_bare_loses_what_made_it_so_and_the_persons_repositories_stay_pinned(
        tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    subprocess.run(["git", "init", "-q", str(ws / "proj")], check=True)
    (ws / "refs").mkdir()  # the person's own folder named refs: kept
    (ws / "refs" / "mine").write_text("theirs")
    protected = protect(ws)
    (ws / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / "objects").mkdir()
    lay_out(ws / "sub" / ".git")
    note = remove_planted(ws, protected)
    # The new HEAD goes; a new objects/ stays (without HEAD git takes no folder for a repository: it may be the
    # agent's work)
    assert not (ws / "HEAD").exists() and (ws / "objects").is_dir(), note
    assert (ws / "refs" / "mine").read_text() == "theirs"
    assert not armed(ws / "sub" / ".git"), note
    assert "proj/.git" in protect(ws).git_dirs  # the next call pins the person's repository


def test_a_walk_past_its_bound_is_refused_before_and_said_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    import shou.git_protect
    import shou.git_walk

    ws = tmp_path / "ws"
    for i in range(30):
        (ws / f"d{i}").mkdir(parents=True)
    protected = protect(ws)
    monkeypatch.setattr(shou.git_walk, "LIMIT", 10)
    monkeypatch.setattr(shou.git_protect, "scan", lambda w, skip, nested=True: shou.git_walk.scan(
        w, skip, nested=nested, limit=10))
    assert "incomplete" in remove_planted(ws, protected)
    with pytest.raises(UserError, match="too many"):
        protect(ws)


def test_the_note_is_short_however_many_repositories_and_settings(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    protected = protect(ws)
    many = "[alias]\n" + "".join(f"\ta{i} = x\n" for i in range(500))
    for i in range(30):
        lay_out(ws / f"r{i}" / ".git", config=many)
    note = remove_planted(ws, protected)
    assert "and 20 more" in note and "and 490 more" in note and len(note) < 4000, note
    assert all("alias" not in (ws / f"r{i}" / ".git" / "config").read_text() for i in range(30))


def test_a_cell_compares_with_the_walk_at_its_start(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    tidy = Tidy(ws, protect(ws))
    # The person clones a repository between cells: theirs, never disarmed.
    subprocess.run(["git", "init", "-q", str(ws / "proj")], check=True)
    subprocess.run(["git", "-C", str(ws / "proj"), "config", "alias.st", "status"], check=True)
    person = (ws / "proj" / ".git" / "config").read_bytes()
    tidy.begin()
    lay_out(ws / "sub" / ".git")  # the cell's program
    note = tidy()
    assert "sub/.git" in note and "proj" not in note, note
    assert (ws / "proj" / ".git" / "config").read_bytes() == person
