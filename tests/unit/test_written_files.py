"""`shou eval`'s list of the files a sample wrote: what the agent left may be any kind of file."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from shou.eval.sample import written_files


def test_fifos_sparse_files_links_and_changes(tmp_path: Path) -> None:
    fixture = tmp_path / "fixture"
    fixture.mkdir()
    (fixture / "same.txt").write_text("same")
    (fixture / "edited.txt").write_text("before")
    (fixture / "link").symlink_to("same.txt")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "same.txt").write_text("same")
    (ws / "edited.txt").write_text("after!")
    (ws / "link").symlink_to("same.txt")
    (ws / "relinked").symlink_to("edited.txt")
    os.mkfifo(ws / "pipe")  # opened, it would block the listing for ever (review 49, F4)
    with open(ws / "sparse", "wb") as f:
        f.truncate(64 << 30)  # read whole, 64 GB
    found: list[list[str]] = []
    worker = threading.Thread(target=lambda: found.append(written_files(ws, fixture)), daemon=True)
    worker.start()
    worker.join(120)
    assert found == [["edited.txt", "pipe", "relinked", "sparse"]]
    assert written_files(ws, {"same.txt": "same", "edited.txt": "after!"}) == ["link", "pipe", "relinked", "sparse"]


def test_a_file_replaced_by_a_link_is_written_whatever_the_file_said(tmp_path: Path) -> None:
    # Review 49b, B8: a link was compared as b"link:" + its target, the bytes of a file saying just that.
    fixture, ws = tmp_path / "fixture", tmp_path / "ws"
    fixture.mkdir()
    ws.mkdir()
    (fixture / "notes.txt").write_text("link:/etc/passwd")
    (ws / "notes.txt").symlink_to("/etc/passwd")
    assert written_files(ws, fixture) == ["notes.txt"]
