"""`shou undo` and `shou diff` after `shou run` (a subprocess, the scripted model over loopback HTTP) changed real
files with the file tools and a sandboxed shell command."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from shou.store.sqlite import SQLiteStore

from .conftest import shou_env


def call(name: str, **arguments: object) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def blobs(workspace: Path) -> set[str]:
    folder = workspace / ".shou" / "checkpoints" / "blobs"
    return {p.name for p in folder.iterdir() if not p.name.startswith(".")} if folder.exists() else set()


def test_undo_restores_written_edited_and_deleted_files_exactly(serve, shou, workspace: Path) -> None:
    (workspace / "edit.txt").write_bytes(b"one\ntwo\nthree")  # no newline at the end: bytes, not lines
    (workspace / "edit.txt").chmod(0o640)
    (workspace / "gone.txt").write_bytes(b"bye\n\x00binary\xff")
    (workspace / "gone.txt").chmod(0o600)
    (workspace / "keep.txt").write_text("untouched\n")
    srv = serve([
        call("write_file", path="new.txt", content="brand new\n"),
        call("edit_file", path="edit.txt", old="two", new="TWO"),
        call("shell", command="rm gone.txt"),
        {"text": "done"},
    ])
    r = shou("run", "change some files", "--session", "s1", server=srv)
    assert r.returncode == 0, r.stderr
    assert not (workspace / "gone.txt").exists() and (workspace / "new.txt").exists()

    d = shou("diff")
    assert d.returncode == 0, d.stderr
    assert "--- /dev/null\n+++ b/new.txt\n" in d.stdout and "+brand new\n" in d.stdout
    assert "--- a/edit.txt\n+++ b/edit.txt\n" in d.stdout and "-two\n+TWO\n" in d.stdout
    assert "--- a/gone.txt\n+++ /dev/null\n(no text diff: binary" in d.stdout
    assert "keep.txt" not in d.stdout
    step = shou("diff", "s1", "--step", "2")
    assert "edit.txt" in step.stdout and "new.txt" not in step.stdout

    u = shou("undo")
    assert u.returncode == 0, u.stderr
    assert "removed new.txt" in u.stdout and "restored edit.txt" in u.stdout and "restored gone.txt" in u.stdout
    assert not (workspace / "new.txt").exists()
    assert (workspace / "edit.txt").read_bytes() == b"one\ntwo\nthree" and mode(workspace / "edit.txt") == 0o640
    assert (workspace / "gone.txt").read_bytes() == b"bye\n\x00binary\xff" and mode(workspace / "gone.txt") == 0o600
    assert (workspace / "keep.txt").read_text() == "untouched\n"
    again = shou("undo")  # that run is undone: nothing more to undo in this session
    assert again.returncode == 0 and "nothing to undo" in again.stdout


def test_a_file_changed_since_by_the_user_is_kept_unless_forced(serve, shou, workspace: Path) -> None:
    (workspace / "a.txt").write_text("original\n")
    srv = serve([call("write_file", path="a.txt", content="by the agent\n"),
                 call("write_file", path="b.txt", content="made by the agent\n"), {"text": "done"}])
    assert shou("run", "rewrite a.txt", server=srv).returncode == 0
    (workspace / "a.txt").write_text("the user's own edit\n")

    refused = shou("undo")
    assert refused.returncode == 1
    assert "a.txt (changed since shou changed it)" in refused.stderr and "--force" in refused.stderr
    assert "b.txt" not in refused.stderr
    assert (workspace / "a.txt").read_text() == "the user's own edit\n"  # nothing was undone, not even b.txt
    assert (workspace / "b.txt").exists()

    forced = shou("undo", "--force")
    assert forced.returncode == 0, forced.stderr
    assert (workspace / "a.txt").read_text() == "original\n" and not (workspace / "b.txt").exists()


def test_undo_to_a_step_then_the_rest_then_the_run_before(serve, shou, workspace: Path) -> None:
    first = serve([call("write_file", path="a.txt", content="a1\n"), {"text": "ok"}])
    assert shou("run", "one", "--session", "s", server=first).returncode == 0
    second = serve([call("write_file", path="a.txt", content="a2\n"),
                    call("write_file", path="b.txt", content="b\n"), {"text": "ok"}])
    assert shou("run", "two", "--session", "s", server=second).returncode == 0

    assert shou("undo", "s", "--to", "1").returncode == 0  # only step 2 of the last run: b.txt
    assert not (workspace / "b.txt").exists() and (workspace / "a.txt").read_text() == "a2\n"
    assert shou("undo", "s").returncode == 0  # the rest of that run
    assert (workspace / "a.txt").read_text() == "a1\n"
    assert shou("undo", "s").returncode == 0  # then the run before it
    assert not (workspace / "a.txt").exists()
    bad = shou("undo", "s", "--run", "nope")
    assert bad.returncode == 2 and "no run 'nope'" in bad.stderr and "Traceback" not in bad.stderr


def test_checkpoints_go_with_their_session_and_stay_under_the_cap(serve, shou, workspace: Path) -> None:
    (workspace / "big.txt").write_text("x" * 3000)  # over a quarter of a 0.01 MB cap: recorded, not kept
    srv = serve([call("write_file", path="big.txt", content="small"), {"text": "ok"}])
    r = shou("run", "big", "--session", "old", server=srv, SHOU_CHECKPOINT_MAX_MB="0.01")
    assert r.returncode == 0 and "big.txt is 3000 bytes, too big to keep a checkpoint of" in r.stderr
    u = shou("undo", "old")
    assert u.returncode == 1 and "not restored: big.txt: too big to keep" in u.stderr
    assert (workspace / "big.txt").read_text() == "small"
    runs = []
    for i in range(3):  # 3 runs of 2 files of 2 KB: the oldest runs are dropped to stay under 10 KB
        srv = serve([call("write_file", path=f"r{i}a.txt", content=f"{i}a" * 1000),
                     call("write_file", path=f"r{i}b.txt", content=f"{i}b" * 1000), {"text": "ok"}])
        r = shou("run", f"run {i}", "--session", "new", server=srv, SHOU_CHECKPOINT_MAX_MB="0.01")
        assert r.returncode == 0, r.stderr
        runs.append(r.stderr)
    # the oldest runs first: the old session's (undone) one, then the new session's first
    assert "dropped the checkpoints of the 2 oldest run(s) to stay under checkpoint_max_mb" in runs[2]
    assert "removed r2a.txt" in shou("undo", "new").stdout
    assert "removed r1a.txt" in shou("undo", "new").stdout
    assert "nothing to undo" in shou("undo", "new").stdout  # run 0's checkpoints were dropped
    assert (workspace / "r0a.txt").exists()
    assert sum(p.stat().st_size for p in (workspace / ".shou/checkpoints/blobs").iterdir()) <= 10 * 1024 * 1.05

    journals = workspace / ".shou" / "checkpoints" / "sessions"
    assert len(list(journals.iterdir())) == 2
    with SQLiteStore(workspace / ".shou" / "shou.db") as store:
        store.delete("new")
    assert shou("diff", "old").returncode == 0  # any checkpoint command drops what deleted sessions left
    assert len(list(journals.iterdir())) == 1 and blobs(workspace) == set()


def test_a_command_killed_with_shou_is_still_undone(serve, shou, tmp_path: Path, workspace: Path) -> None:
    (workspace / "a.txt").write_text("a before\n")
    (workspace / "b.txt").write_text("b before\n")
    command = "echo changed > a.txt && rm b.txt && echo made > c.txt && touch ready && sleep 300"
    srv = serve([call("shell", command=command), {"text": "never"}])
    proc = subprocess.Popen([sys.executable, "-m", "shou", "run", "change files", "--session", "k"], cwd=workspace,
                            env=shou_env(tmp_path, srv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60  # a hang guard only: the command says when it is done with the files
        while not (workspace / "ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the command never ran"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # kill -9 while the command runs: its changes were never recorded
        proc.wait()
    assert (workspace / "c.txt").exists() and not (workspace / "b.txt").exists()

    d = shou("diff", "k")  # the scan before the command was on disk: the changes are recorded now
    assert "-a before\n+changed\n" in d.stdout and "+++ b/c.txt" in d.stdout, d.stderr
    u = shou("undo", "k")
    assert u.returncode == 0, u.stderr
    assert (workspace / "a.txt").read_text() == "a before\n" and (workspace / "b.txt").read_text() == "b before\n"
    assert not (workspace / "c.txt").exists() and not (workspace / "ready").exists()


def test_a_sub_agent_s_changes_are_its_run_s_at_the_step_that_delegated(serve, shou, workspace: Path) -> None:
    srv = serve([
        call("write_file", path="parent.txt", content="by the parent\n"),
        call("delegate", task="Write child.txt"),
        call("write_file", path="child.txt", content="by the child\n"),  # the child's own turns
        {"text": "child wrote it"},
        {"text": "done"},
    ])
    r = shou("run", "write two files", server=srv)
    assert r.returncode == 0, r.stderr
    assert (workspace / "child.txt").exists()
    d = shou("diff", "--step", "2")
    assert "+++ b/child.txt" in d.stdout and "parent.txt" not in d.stdout
    assert shou("undo", "--to", "1").returncode == 0  # the delegate call was step 2: the child's write goes
    assert not (workspace / "child.txt").exists() and (workspace / "parent.txt").exists()
    assert shou("undo").returncode == 0
    assert not (workspace / "parent.txt").exists()


def test_a_file_a_command_moved_whose_content_was_not_kept_is_moved_back_not_destroyed(
        serve, shou, workspace: Path) -> None:
    # A command moved a file too big to keep (and a folder of files past what one command keeps): undo removed
    # the moved copies, the run's "created" files, and could not put the originals back: the only copies were
    # destroyed by the command meant to put things back.
    big = os.urandom(2 * 2**20)
    (workspace / "dataset.bin").write_bytes(big)
    (workspace / "photos").mkdir()
    photos = {f"p{i:02}.jpg": os.urandom(900 * 1024) for i in range(24)}  # 21 MB: past the 16 MB budget
    for name, data in photos.items():
        (workspace / "photos" / name).write_bytes(data)
    os.chmod(workspace / "photos" / "p00.jpg", 0o600)
    before = {p: p.stat().st_mtime_ns for p in workspace.rglob("*") if p.is_file()}
    command = "mkdir -p data && mv dataset.bin data/dataset.bin && mv photos archive"
    srv = serve([call("shell", command=command), {"text": "moved"}])
    r = shou("run", "tidy up", "--session", "mv", server=srv, SHOU_CHECKPOINT_MAX_MB="1")
    assert r.returncode == 0, r.stderr
    assert not (workspace / "dataset.bin").exists() and (workspace / "archive" / "p00.jpg").exists()
    u = shou("undo", "mv")
    assert u.returncode == 0 and "Traceback" not in u.stderr, u.stdout + u.stderr
    assert (workspace / "dataset.bin").read_bytes() == big
    for name, data in photos.items():
        assert (workspace / "photos" / name).read_bytes() == data, name
    assert stat.S_IMODE((workspace / "photos" / "p00.jpg").stat().st_mode) == 0o600
    assert not (workspace / "data" / "dataset.bin").exists() and not list((workspace / "archive").glob("*"))
    assert {p: p.stat().st_mtime_ns for p in before} == before  # moved back as they were, times and all


def test_a_moved_file_whose_old_path_is_taken_again_is_kept_where_it_is(serve, shou, workspace: Path) -> None:
    big = os.urandom(2 * 2**20)
    (workspace / "dataset.bin").write_bytes(big)
    srv = serve([call("shell", command="mv dataset.bin moved.bin"), {"text": "moved"}])
    assert shou("run", "move it", "--session", "mv2", server=srv, SHOU_CHECKPOINT_MAX_MB="1").returncode == 0
    (workspace / "dataset.bin").write_text("the user's new file\n")  # made again outside shou since
    u = shou("undo", "mv2", "--force")
    assert (workspace / "moved.bin").read_bytes() == big, u.stdout + u.stderr  # the only copy: kept
    assert "moved.bin" in u.stderr and "Traceback" not in u.stderr


def test_folders_named_like_shou_s_own_are_seen_by_diff_and_undo(serve, shou, workspace: Path) -> None:
    # The scan skipped any folder whose name folded to .shou or .git, at any depth: on a file system that does
    # not fold case, `.Shou/`, `.GIT/` and a subfolder's `.shou/` are ordinary folders, and a command's writes
    # there were in neither `shou diff` nor `shou undo`.
    command = "mkdir -p .Shou .GIT sub/.shou && echo a > .Shou/a && echo b > .GIT/b && echo c > sub/.shou/c"
    srv = serve([call("shell", command=command), {"text": "done"}])
    assert shou("run", "make folders", "--session", "cf", server=srv).returncode == 0
    d = shou("diff", "cf")
    for path in (".Shou/a", ".GIT/b", "sub/.shou/c"):
        assert f"+++ b/{path}" in d.stdout, (path, d.stdout, d.stderr)
    u = shou("undo", "cf")
    assert u.returncode == 0, u.stdout + u.stderr
    assert not any((workspace / p).exists() for p in (".Shou/a", ".GIT/b", "sub/.shou/c"))


def _two_alike(workspace: Path) -> tuple[bytes, bytes]:
    """Two files too big to keep, of one size, time and mode, different bytes (as `cp -p`, `touch -d`, `tar x`
    or `rsync -t` leave them)."""
    a, b = os.urandom(2 * 2**20), os.urandom(2 * 2**20)
    (workspace / "A.bin").write_bytes(a)
    (workspace / "B.bin").write_bytes(b)
    t = 1_700_000_000_000_000_000
    for name in ("A.bin", "B.bin"):
        os.utime(workspace / name, ns=(t, t))
    return a, b


def test_two_moved_files_alike_in_size_time_and_mode_go_back_each_to_its_own_path(
        serve, shou, workspace: Path) -> None:
    # Matched by size, time and mode only, undo swapped them: A.bin got B's bytes, silently.
    a, b = _two_alike(workspace)
    srv = serve([call("shell", command="mv A.bin zz.bin && mv B.bin aa.bin"), {"text": "moved"}])
    assert shou("run", "move", "--session", "sw", server=srv, SHOU_CHECKPOINT_MAX_MB="1").returncode == 0
    u = shou("undo", "sw")
    assert u.returncode == 0 and "Traceback" not in u.stderr, u.stdout + u.stderr
    assert (workspace / "A.bin").read_bytes() == a and (workspace / "B.bin").read_bytes() == b
    assert not (workspace / "zz.bin").exists() and not (workspace / "aa.bin").exists()


def test_a_copy_that_looks_like_a_deleted_file_is_not_taken_for_it(serve, shou, workspace: Path) -> None:
    # `rm A.bin && cp -p B.bin C.bin`: C.bin has A's size, time and mode (and, on ext4, often A's freed inode
    # number): undo "restored" A.bin with B's bytes. C.bin is not A.bin: it is kept, and said so.
    _, b = _two_alike(workspace)
    srv = serve([call("shell", command="rm A.bin && cp -p B.bin C.bin"), {"text": "done"}])
    assert shou("run", "x", "--session", "cp", server=srv, SHOU_CHECKPOINT_MAX_MB="1").returncode == 0
    u = shou("undo", "cp")
    assert "Traceback" not in u.stderr, u.stdout + u.stderr
    assert not (workspace / "A.bin").exists(), "undo 'restored' A.bin with B.bin's bytes: " + u.stdout + u.stderr
    assert (workspace / "C.bin").read_bytes() == b and (workspace / "B.bin").read_bytes() == b
    assert "kept C.bin" in u.stderr and "A.bin" in u.stderr, u.stderr


def test_a_big_file_moved_onto_a_kept_file_is_moved_back_and_the_kept_file_restored(
        serve, shou, workspace: Path) -> None:
    # `mv big.bin notes.txt`: undo put back notes.txt from its checkpoint over the only copy of big.bin.
    big = os.urandom(2 * 2**20)
    (workspace / "big.bin").write_bytes(big)
    (workspace / "notes.txt").write_text("old notes\n")
    srv = serve([call("shell", command="mv big.bin notes.txt"), {"text": "moved"}])
    assert shou("run", "x", "--session", "ov", server=srv, SHOU_CHECKPOINT_MAX_MB="1").returncode == 0
    u = shou("undo", "ov")
    assert u.returncode == 0 and "Traceback" not in u.stderr, u.stdout + u.stderr
    assert (workspace / "big.bin").read_bytes() == big
    assert (workspace / "notes.txt").read_text() == "old notes\n"


def test_a_big_file_moved_onto_a_kept_file_is_kept_when_its_old_path_is_taken(
        serve, shou, workspace: Path) -> None:
    big = os.urandom(2 * 2**20)
    (workspace / "big.bin").write_bytes(big)
    (workspace / "notes.txt").write_text("old notes\n")
    srv = serve([call("shell", command="mv big.bin notes.txt"), {"text": "moved"}])
    assert shou("run", "x", "--session", "ov2", server=srv, SHOU_CHECKPOINT_MAX_MB="1").returncode == 0
    (workspace / "big.bin").write_text("made again outside shou\n")
    u = shou("undo", "ov2", "--force")
    assert "Traceback" not in u.stderr, u.stdout + u.stderr
    assert (workspace / "notes.txt").read_bytes() == big, u.stdout + u.stderr  # the only copy: not overwritten
    assert (workspace / "big.bin").read_text() == "made again outside shou\n"
    assert "notes.txt" in u.stderr and "big.bin" in u.stderr, u.stderr


def test_a_state_from_an_older_journal_with_no_inode_never_moves_a_file() -> None:
    # Journals written before the inode was kept: a file of the same size, time and mode only looks alike.
    from shou.checkpoints.restore import _matches

    old = {"size": 5, "mode": 0o644, "mtime": 7, "big": True}
    assert _matches((5, 7, 0o644, 42, 1), old) == "alike"
    assert _matches((5, 7, 0o644, 42, 1), {**old, "ino": 42, "seen": 2}) == "same"
    assert _matches((5, 7, 0o644, 42, 3), {**old, "ino": 42, "seen": 2}) == "alike"  # made since: inode reused
    assert _matches((5, 7, 0o644, 42, None), {**old, "ino": 42, "seen": 2}) == "alike"  # no birth time known
    assert _matches((6, 7, 0o644, 42, 1), {**old, "ino": 42, "seen": 2}) is None
