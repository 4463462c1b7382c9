"""Checkpoints (shou.checkpoints) on real files: a kill at any point between the before-image and the change
still undoes right, every prefix of a journal reads, and undo follows no symlink the workspace put in its way."""

from __future__ import annotations

import os
from pathlib import Path

from shou.checkpoints import Book, CallRecorder, changes, precapture, scan, select, undo
from shou.checkpoints.history import plan


def recorder(book: Book, run: str = "r1", step: int = 1, call: str = "c1") -> CallRecorder:
    return CallRecorder(book, "s", "s", run, step, call, "write_file")


def test_a_kill_before_the_change_or_before_its_record_still_undoes(tmp_path: Path) -> None:
    book = Book(tmp_path)
    (tmp_path / "a.txt").write_bytes(b"old")
    recorder(book).before("a.txt", b"new")  # killed here: the file never changed
    assert not undo(book, changes(book.records("s"))).conflicts
    assert (tmp_path / "a.txt").read_bytes() == b"old"

    book = Book(tmp_path / "w2")
    (tmp_path / "w2").mkdir()
    (tmp_path / "w2" / "a.txt").write_bytes(b"old")
    recorder(book).before("a.txt", b"new")
    (tmp_path / "w2" / "a.txt").write_bytes(b"new")  # killed after the write, before the after record
    out = undo(book, changes(book.records("s")))
    assert not out.conflicts and out.restored == ["a.txt"]
    assert (tmp_path / "w2" / "a.txt").read_bytes() == b"old"


def test_a_kill_then_someone_elses_change_is_a_conflict(tmp_path: Path) -> None:
    book = Book(tmp_path)
    (tmp_path / "a.txt").write_bytes(b"old")
    recorder(book).before("a.txt", b"new")
    (tmp_path / "a.txt").write_bytes(b"someone else's")
    out = undo(book, changes(book.records("s")))
    assert out.conflicts == ["a.txt (changed since shou changed it)"] and not out.restored
    assert (tmp_path / "a.txt").read_bytes() == b"someone else's"


def test_every_prefix_of_a_journal_reads(tmp_path: Path) -> None:
    book = Book(tmp_path)
    for i, name in enumerate(["a.txt", "b.txt", "a.txt"]):
        rec = recorder(book, step=i + 1, call=f"c{i}")
        rec.before(name, b"x")
        (tmp_path / name).write_text(f"v{i}")
        rec.after(name)
    book.append("s", "s", {"k": "undone", "run": "r1", "after_step": 2})
    records = book.records("s")
    for n in range(len(records) + 1):
        found = changes(records[:n])
        assert all(c.path in ("a.txt", "b.txt") for c in found)
        plan(found)
    assert [c.step for c in changes(records)] == [1, 2]  # step 3 was undone
    [a] = [p for p in plan(changes(records)) if p.path == "a.txt"]
    assert a.target is None  # a.txt did not exist before the run


def test_undo_follows_no_symlink_put_in_its_way(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("keep me")
    (ws / "d").mkdir()
    book = Book(ws)
    (ws / "d" / "a.txt").write_text("old")
    rec = recorder(book)
    rec.before("d/a.txt", b"new")
    (ws / "d" / "a.txt").write_text("new")
    rec.after("d/a.txt")
    (ws / "d" / "a.txt").unlink()
    (ws / "d").rmdir()
    os.symlink(outside, ws / "d")  # the folder swapped for a link out of the workspace
    out = undo(book, changes(book.records("s")), force=True)
    assert out.lost and "symlink" in out.lost[0] and not out.restored
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_text() == "keep me"


def test_a_command_s_changes_are_found_by_scanning(tmp_path: Path) -> None:
    book = Book(tmp_path)
    (tmp_path / "kept.txt").write_text("before")
    (tmp_path / "gone.txt").write_text("bye")
    (tmp_path / ".git").mkdir()
    before = scan(tmp_path)
    kept = precapture(book, before)
    (tmp_path / "kept.txt").write_text("after, longer")
    (tmp_path / "gone.txt").unlink()
    (tmp_path / "made.txt").write_text("hi")
    (tmp_path / ".git" / "index").write_text("git's own")
    rec = CallRecorder(book, "s", "s", "r1", 1, "c1", "shell")
    assert rec.command(before, kept, scan(tmp_path)) == ["gone.txt", "kept.txt", "made.txt"]
    _, chosen = select(changes(book.records("s")))
    out = undo(book, chosen)
    assert sorted(out.restored) == ["gone.txt", "kept.txt"] and out.removed == ["made.txt"]
    assert (tmp_path / "kept.txt").read_text() == "before" and (tmp_path / "gone.txt").read_text() == "bye"


def test_a_run_whose_tools_cannot_change_files_never_opens_the_checkpoint_book(tmp_path: Path) -> None:
    # A plain function gets no context, so it cannot reach a recorder: its calls cost no journal lookups (the
    # book, the deleted sessions' sweep, the killed commands' recovery) and leave no `.shou/checkpoints/`.
    from shou import Agent, ScriptedModel, SQLiteStore, tool

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @tool
    def write_file(path: str, content: str) -> str:  # a user's tool named like the built-in: no context either
        """Pretend to write."""
        return "ok"

    ws = tmp_path / "ws"
    ws.mkdir()
    store = SQLiteStore(tmp_path / "s.db")
    model = ScriptedModel([{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]},
                           {"tool_calls": [{"name": "write_file", "arguments": {"path": "x", "content": "y"}}]},
                           {"text": "3"}])
    result = Agent(model, [add, write_file], workspace=ws, store=store).run("add")
    assert result.answer == "3" and result.steps == 3
    assert not (ws / ".shou" / "checkpoints").exists()
