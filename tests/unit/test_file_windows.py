"""`read_file` reads a window without loading the file, and `edit_file` stays bounded: the edges of both
(last lines without a newline, cut characters, the scan cap, non-UTF-8 bytes, big files)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from shou.errors import ToolError
from shou.tools.base import Tool, ToolContext, ToolResult
from shou.tools.builtin.files import edit_file, read_file
from shou.tools.truncate import MAX_BYTES


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


async def run(t: Tool, ws: Path, **args: object) -> object:
    return await t.call(t.validate(args), ToolContext(workspace=ws))


async def test_a_last_line_without_a_newline_counts_as_a_line(ws: Path) -> None:
    (ws / "f.txt").write_text("a\nb\nc")
    assert await run(read_file, ws, path="f.txt", offset=3) == "c"
    assert await run(read_file, ws, path="f.txt", offset=2, limit=1) == \
        "b\n[... 1 more lines; call read_file with offset=3 to read on]\n"
    with pytest.raises(ToolError, match="which has 3 lines"):
        await run(read_file, ws, path="f.txt", offset=4)
    (ws / "g.txt").write_text("a\nb\n")
    with pytest.raises(ToolError, match="which has 2 lines"):
        await run(read_file, ws, path="g.txt", offset=3)
    (ws / "empty.txt").write_text("")
    assert await run(read_file, ws, path="empty.txt", offset=5) == "(empty file)"


async def test_crlf_lines_are_lines(ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    assert await run(read_file, ws, path="w.txt", offset=2, limit=1) == \
        "two\r\n[... 1 more lines; call read_file with offset=3 to read on]\n"


async def test_a_huge_line_is_cut_where_a_character_ends(ws: Path) -> None:
    (ws / "u.txt").write_text("é" * MAX_BYTES + "\nnext\n")  # two bytes a character: the cap falls inside one
    out = await run(read_file, ws, path="u.txt")
    assert isinstance(out, str)
    head, note = out.split("\n[... ", 1)
    assert set(head) == {"é"} and len(head.encode()) <= MAX_BYTES
    assert note.startswith(f"{2 * MAX_BYTES - len(head.encode()) + 1 + 5} bytes omitted") and "offset=2" in note


async def test_bytes_that_are_not_utf8_only_matter_inside_the_window(ws: Path) -> None:
    (ws / "m.txt").write_bytes(b"good line\n\xff\xfe bad line\n")
    assert await run(read_file, ws, path="m.txt", limit=1) == \
        "good line\n[... 1 more lines; call read_file with offset=2 to read on]\n"
    with pytest.raises(ToolError, match="not UTF-8"):
        await run(read_file, ws, path="m.txt", offset=2)


async def test_the_scan_cap_is_said_not_hit_silently(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shou.tools import linewindow

    monkeypatch.setattr(linewindow, "MAX_SCAN_BYTES", 4096)
    (ws / "long.txt").write_text("".join(f"{i:07d}\n" for i in range(10_000)))  # 80 KB
    with pytest.raises(ToolError, match=r"offset 9000 is too far into 'long\.txt'.*first 4096 bytes"):
        await run(read_file, ws, path="long.txt", offset=9000)
    out = await run(read_file, ws, path="long.txt", offset=10, limit=2)
    assert out == "0000009\n0000010\n[... at least 512 more lines; call read_file with offset=12 to read on]\n"


async def test_the_window_is_the_asked_lines_of_a_big_file(ws: Path) -> None:
    (ws / "big.txt").write_text("".join(f"{i}\n" for i in range(1, 2_000_001)))
    tracemalloc.start()
    try:
        out = await run(read_file, ws, path="big.txt", offset=1_999_998, limit=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out == "1999998\n1999999\n[... 1 more lines; call read_file with offset=2000000 to read on]\n"
    assert peak < 8 * 1024 * 1024, peak  # a couple of 1 MiB chunks, not the 15 MB file and its lines


async def test_edit_refuses_a_file_over_its_cap_and_leaves_it_alone(ws: Path) -> None:
    from shou.tools.builtin.files import MAX_EDIT_BYTES

    data = b"x = 1\n" * (MAX_EDIT_BYTES // 6 + 1)
    (ws / "huge.py").write_bytes(data)
    with pytest.raises(ToolError, match=rf"edit_file edits files of at most {MAX_EDIT_BYTES} bytes"):
        await run(edit_file, ws, path="huge.py", old="x = 1\nx = 1\n", new="y")
    assert (ws / "huge.py").read_bytes() == data


async def test_an_edit_of_a_big_file_diffs_only_the_change(ws: Path) -> None:
    lines = [f"line {i:07d}\n" for i in range(1, 500_001)]  # 6.5 MB
    (ws / "big.txt").write_text("".join(lines))
    tracemalloc.start()
    try:
        result = await run(edit_file, ws, path="big.txt", old="line 0400000\n", new="changed\nand added\n")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(result, ToolResult) and result.details is not None
    lines[399_999:400_000] = ["changed\n", "and added\n"]
    assert (ws / "big.txt").read_text() == "".join(lines)
    diff = result.details["diff"]
    assert diff.splitlines()[2] == "@@ -399997,7 +399997,8 @@"  # numbered from the top of the file
    assert "-line 0400000\n+changed\n+and added\n" in diff and diff.count("\n line ") == 6
    assert peak < 6 * 6_500_000, peak  # the text, its edited copy and their bytes: not a list of every line


async def test_parallel_edits_of_one_file_all_land(tmp_path: Path) -> None:
    """The calls of one turn run at once: every edit of the same file must survive the others (each reads the
    file and replaces it whole, so unserialised, one would write back what another had just changed)."""
    import asyncio

    lines = [f"item {i}: todo\n" for i in range(16)]
    (tmp_path / "list.txt").write_text("".join(lines))
    results = await asyncio.gather(*(run(edit_file, tmp_path, path="list.txt", old=f"item {i}: todo",
                                         new=f"item {i}: done") for i in range(16)))
    assert all(isinstance(r, ToolResult) for r in results)
    assert (tmp_path / "list.txt").read_text() == "".join(f"item {i}: done\n" for i in range(16))
