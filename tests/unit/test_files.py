"""The file tools: reading, writing, editing, listing, and staying inside the workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shou.errors import ToolError
from shou.tools.base import Tool, ToolContext, ToolResult
from shou.tools.builtin.files import MAX_LIST, edit_file, list_files, read_file, write_file
from shou.tools.truncate import MAX_BYTES, MAX_LINES
from shou.workspace import relative_parts

OUTSIDE = r"is outside the workspace .*; use a path relative to it"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder next to the workspace holding a secret the tools must never reach."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("TOP SECRET\n")
    return out


async def run(t: Tool, ws: Path, **args: object) -> object:
    return await t.call(t.validate(args), ToolContext(workspace=ws))


# ---------------------------------------------------------------- confinement


@pytest.mark.parametrize("path", ["../x", "a/../../x", "../outside/secret.txt", "a/b/../../../x"])
async def test_relative_escape_is_refused(ws: Path, outside: Path, path: str) -> None:
    with pytest.raises(ToolError, match=OUTSIDE):
        await run(read_file, ws, path=path)
    with pytest.raises(ToolError, match=OUTSIDE):
        await run(write_file, ws, path=path, content="x")
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"
    assert not (ws.parent / "x").exists()


async def test_absolute_path_outside_is_refused(ws: Path, outside: Path) -> None:
    with pytest.raises(ToolError, match=OUTSIDE):
        await run(read_file, ws, path=str(outside / "secret.txt"))
    with pytest.raises(ToolError, match=OUTSIDE):
        await run(edit_file, ws, path="/etc/passwd", old="root", new="toor")


async def test_absolute_path_inside_is_allowed(ws: Path) -> None:
    (ws / "a.txt").write_text("hello\n")
    assert await run(read_file, ws, path=str(ws / "a.txt")) == "hello\n"


async def test_dotdot_that_stays_inside_is_allowed(ws: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "a.txt").write_text("hello\n")
    assert await run(read_file, ws, path="sub/../a.txt") == "hello\n"


async def test_symlinked_file_pointing_outside_is_refused(ws: Path, outside: Path) -> None:
    (ws / "link.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(ToolError, match="symlink"):
        await run(read_file, ws, path="link.txt")
    with pytest.raises(ToolError, match="symlink"):
        await run(write_file, ws, path="link.txt", content="pwned")
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"


async def test_symlinked_directory_pointing_outside_is_refused(ws: Path, outside: Path) -> None:
    (ws / "dir").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ToolError, match="symlink"):
        await run(read_file, ws, path="dir/secret.txt")
    with pytest.raises(ToolError, match="symlink"):
        await run(write_file, ws, path="dir/new.txt", content="x")
    # `dir/..` is the workspace's parent as the OS sees it, even though it looks like the workspace
    with pytest.raises(ToolError):
        await run(read_file, ws, path="dir/../outside/secret.txt")
    assert not (outside / "new.txt").exists()


async def test_dangling_symlink_outside_is_refused(ws: Path, tmp_path: Path) -> None:
    target = tmp_path / "not-yet.txt"
    (ws / "dangling").symlink_to(target)
    with pytest.raises(ToolError, match="symlink"):
        await run(write_file, ws, path="dangling", content="x")
    assert not target.exists()


async def test_no_symlink_is_followed_even_inside_the_workspace(ws: Path) -> None:
    # A link that points inside today can point outside a moment later (the sandbox can rewrite it).
    (ws / "real.txt").write_text("inside\n")
    (ws / "alias.txt").symlink_to(ws / "real.txt")
    (ws / "sub").mkdir()
    (ws / "subalias").symlink_to(ws / "sub", target_is_directory=True)
    with pytest.raises(ToolError, match="symlink"):
        await run(read_file, ws, path="alias.txt")
    with pytest.raises(ToolError, match="symlink"):
        await run(write_file, ws, path="subalias/new.txt", content="x")
    assert not (ws / "sub" / "new.txt").exists()


def test_relative_parts_resolves_the_spelling(ws: Path) -> None:
    assert relative_parts(ws, "a/b.txt") == ("a", "b.txt")
    assert relative_parts(ws, str(ws / "c")) == ("c",)
    assert relative_parts(ws, "./a/../b//c") == ("b", "c")
    assert relative_parts(ws, "..foo/x") == ("..foo", "x")
    with pytest.raises(ToolError, match="empty"):
        relative_parts(ws, "  ")
    with pytest.raises(ToolError, match="cannot be used"):
        relative_parts(ws, "a\0b")


@pytest.mark.parametrize("pattern", ["../*", "../**/*", "/etc/*", "a/../../*", ".."])
async def test_list_files_refuses_escaping_patterns(ws: Path, pattern: str) -> None:
    with pytest.raises(ToolError, match="relative to the workspace"):
        await run(list_files, ws, pattern=pattern)


async def test_list_files_never_walks_through_symlinks(ws: Path, outside: Path) -> None:
    (ws / "dir").symlink_to(outside, target_is_directory=True)
    (ws / "file").symlink_to(outside / "secret.txt")
    (ws / "ok.txt").write_text("")
    assert await run(list_files, ws, pattern="dir/*") == "no files match 'dir/*'"
    assert await run(list_files, ws, pattern="**/*") == "dir@\nfile@\nok.txt"  # shown as links, not entered


# ---------------------------------------------------------------- read_file


async def test_read_missing_file_names_it_and_suggests_list_files(ws: Path) -> None:
    with pytest.raises(ToolError, match=r"'nope\.txt'.*list_files"):
        await run(read_file, ws, path="nope.txt")


async def test_read_binary_file_is_refused(ws: Path) -> None:
    (ws / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    with pytest.raises(ToolError, match="binary"):
        await run(read_file, ws, path="img.png")


async def test_read_directory_is_refused(ws: Path) -> None:
    (ws / "src").mkdir()
    with pytest.raises(ToolError, match="directory"):
        await run(read_file, ws, path="src")


async def test_read_with_offset_and_limit(ws: Path) -> None:
    (ws / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = await run(read_file, ws, path="n.txt", offset=3, limit=2)
    assert out.startswith("line 3\nline 4\n")
    assert "offset=5" in out and "6 more lines" in out
    assert await run(read_file, ws, path="n.txt", offset=9) == "line 9\nline 10\n"
    with pytest.raises(ToolError, match="past the end"):
        await run(read_file, ws, path="n.txt", offset=11)
    with pytest.raises(ToolError, match="offset must be"):
        await run(read_file, ws, path="n.txt", offset=0)


async def test_read_long_file_is_truncated_with_offset_hint(ws: Path) -> None:
    (ws / "big.txt").write_text("".join(f"{i}\n" for i in range(1, MAX_LINES + 501)))
    out = await run(read_file, ws, path="big.txt")
    assert isinstance(out, str)
    assert out.startswith("1\n2\n")
    assert f"{MAX_LINES}\n[..." in out
    assert f"offset={MAX_LINES + 1}" in out
    assert f"{MAX_LINES + 1}\n" not in out
    # following the hint picks up exactly where the cut was
    rest = await run(read_file, ws, path="big.txt", offset=MAX_LINES + 1)
    assert rest == "".join(f"{i}\n" for i in range(MAX_LINES + 1, MAX_LINES + 501))


async def test_read_one_enormous_line_is_cut_not_dropped(ws: Path) -> None:
    (ws / "min.js").write_text("x" * (MAX_BYTES * 2) + "\nnext\n")
    out = await run(read_file, ws, path="min.js")
    assert isinstance(out, str)
    assert out.startswith("x" * 100)
    assert len(out) < MAX_BYTES + 500
    assert "offset=2" in out


# ---------------------------------------------------------------- write_file


async def test_write_creates_parents_and_reports_bytes(ws: Path) -> None:
    out = await run(write_file, ws, path="a/b/c.txt", content="héllo\n")
    assert out == "created a/b/c.txt (7 bytes)"
    assert (ws / "a/b/c.txt").read_bytes() == "héllo\n".encode()
    out = await run(write_file, ws, path="a/b/c.txt", content="")
    assert out == "overwrote a/b/c.txt (0 bytes)"


# ---------------------------------------------------------------- edit_file


async def test_edit_replaces_once_and_puts_diff_in_details(ws: Path) -> None:
    (ws / "m.py").write_text("def f():\n    return 1\n")
    result = await run(edit_file, ws, path="m.py", old="return 1", new="return 2")
    assert isinstance(result, ToolResult)
    assert "\n" not in result.content and "m.py" in result.content
    assert (ws / "m.py").read_text() == "def f():\n    return 2\n"
    assert result.details is not None
    diff = result.details["diff"]
    assert "-    return 1\n" in diff and "+    return 2\n" in diff and "+++ b/m.py" in diff


async def test_edit_zero_matches_explains_what_to_check(ws: Path) -> None:
    (ws / "m.py").write_text("def f():\n    return 1\n")
    with pytest.raises(ToolError, match=r"(?s)whitespace.*indentation.*read_file"):
        await run(edit_file, ws, path="m.py", old="\treturn 1", new="\treturn 2")
    assert (ws / "m.py").read_text() == "def f():\n    return 1\n"


async def test_edit_several_matches_says_how_many(ws: Path) -> None:
    (ws / "m.py").write_text("x = 1\ny = 1\nz = 1\n")
    with pytest.raises(ToolError, match=r"3 times.*more surrounding"):
        await run(edit_file, ws, path="m.py", old="= 1", new="= 2")
    assert (ws / "m.py").read_text() == "x = 1\ny = 1\nz = 1\n"


async def test_edit_matches_crlf_files(ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    await run(edit_file, ws, path="w.txt", old="one\ntwo", new="1\n2")
    assert (ws / "w.txt").read_bytes() == b"1\r\n2\r\n"


async def test_edit_missing_file_and_empty_old(ws: Path) -> None:
    with pytest.raises(ToolError, match="list_files"):
        await run(edit_file, ws, path="nope.py", old="a", new="b")
    (ws / "m.py").write_text("a\n")
    with pytest.raises(ToolError, match="empty"):
        await run(edit_file, ws, path="m.py", old="", new="b")


# ---------------------------------------------------------------- list_files


async def test_list_is_sorted_relative_and_skips_git_and_shou(ws: Path) -> None:
    for name in ["b.txt", "a/z.py", "a/c.py", ".git/HEAD", ".shou/state.db", "sub/.git/config", ".env"]:
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text("")
    out = await run(list_files, ws)
    assert out == "\n".join([".env", "a/", "a/c.py", "a/z.py", "b.txt", "sub/"])
    assert await run(list_files, ws, pattern="**/*.py") == "a/c.py\na/z.py"
    assert await run(list_files, ws, pattern="*.md") == "no files match '*.md'"


async def test_list_caps_results_with_a_note(ws: Path) -> None:
    for i in range(MAX_LIST + 5):
        (ws / f"f{i:05}.txt").write_text("")
    out = await run(list_files, ws, pattern="*.txt")
    assert isinstance(out, str)
    lines = out.splitlines()
    assert len(lines) == MAX_LIST + 1
    assert lines[0] == "f00000.txt"
    assert f"{MAX_LIST} of {MAX_LIST + 5}" in lines[-1]


async def test_list_bad_glob_is_a_tool_error(ws: Path) -> None:
    with pytest.raises(ToolError, match="glob"):
        await run(list_files, ws, pattern="a**b/*")


async def test_workspace_given_through_a_symlink(tmp_path: Path, ws: Path) -> None:
    alias = tmp_path / "alias"
    os.symlink(ws, alias)
    assert relative_parts(alias, str(alias / "x.txt")) == ("x.txt",)
    assert relative_parts(alias, str(ws / "x.txt")) == ("x.txt",)
    await run(write_file, alias, path=str(ws / "x.txt"), content="hi")
    assert (ws / "x.txt").read_text() == "hi"
