"""File tools confined to the workspace: `read_file`, `write_file`, `edit_file`, `list_files`.

Every path goes through `resolve_in_workspace`, which resolves symlinks before checking, so neither
`..` nor a symlink (even a dangling one) can lead a tool outside the workspace. The check and the
later open are not atomic: a process racing to swap in a symlink between them is out of scope.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from ...errors import ToolError
from ..base import ToolContext, ToolResult, tool
from ..truncate import truncate

__all__ = ["edit_file", "list_files", "read_file", "resolve_in_workspace", "write_file"]

MAX_FILE_BYTES = 50 * 1024 * 1024  # read_file loads the whole file; past this it would hog memory
MAX_LIST = 1000
SKIP_DIRS = frozenset({".git", ".shou"})
_SNIFF_BYTES = 8192


def resolve_in_workspace(workspace: Path, path: str) -> Path:
    """The real path `path` names inside `workspace`; `ToolError` if it would lead outside.

    Relative paths are taken from the workspace root; absolute paths are allowed when they are inside
    it. Symlinks are followed (also dangling ones and ones in the middle of the path) and the target
    must be inside the workspace too.
    """
    root = workspace.resolve()
    if not path.strip():
        raise ToolError("path is empty; give a path relative to the workspace, e.g. 'src/main.py'")
    try:
        # The literal spelling is checked against the root as given and as resolved, so an absolute
        # path through a symlinked workspace (say /tmp -> /private/tmp) still counts as inside.
        spelled = Path(os.path.normpath(os.path.join(os.path.abspath(workspace), path)))
        if not (spelled.is_relative_to(root) or spelled.is_relative_to(os.path.abspath(workspace))):
            raise ToolError(f"path {path!r} is outside the workspace {root}; use a path relative to it")
        real = Path(os.path.realpath(os.path.join(root, path)))
    except (OSError, ValueError, RuntimeError) as e:  # NUL bytes, symlink loops, over-long names
        raise ToolError(f"path {path!r} cannot be used: {e}") from None
    if not real.is_relative_to(root):
        raise ToolError(
            f"path {path!r} goes through a symlink that leads outside the workspace {root}; "
            "only files inside the workspace can be used"
        )
    return real


def _display(root: Path, real: Path) -> str:
    return real.relative_to(root.resolve()).as_posix() or "."


def _read_text(root: Path, path: str) -> tuple[Path, str]:
    real = resolve_in_workspace(root, path)
    if real.is_dir():
        raise ToolError(f"{path!r} is a directory; call list_files with pattern '{path.rstrip('/')}/*'")
    if not real.is_file():
        raise ToolError(f"file {path!r} does not exist in the workspace; "
                        "call list_files to see what is there")
    size = real.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ToolError(f"{path!r} is {size} bytes, too large for read_file (limit {MAX_FILE_BYTES})")
    try:
        data = real.read_bytes()
    except OSError as e:
        raise ToolError(f"cannot read {path!r}: {e.strerror or e}") from None
    if b"\0" in data[:_SNIFF_BYTES]:
        raise ToolError(f"{path!r} looks like a binary file ({size} bytes); read_file only reads text")
    try:
        return real, data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{path!r} is not UTF-8 text ({size} bytes); read_file only reads UTF-8") from None


@tool
def read_file(path: str, ctx: ToolContext, offset: int = 1, limit: int | None = None) -> str:
    """Read a text file in the workspace. Long files are cut; the note at the end says how to read on.

    Args:
        path: File path relative to the workspace root.
        offset: Line number to start at (1 is the first line).
        limit: Most lines to return; omit to read to the end.
    """
    if offset < 1:
        raise ToolError(f"offset must be 1 or more (got {offset}); line numbers start at 1")
    if limit is not None and limit < 1:
        raise ToolError(f"limit must be 1 or more (got {limit}); omit it to read to the end")
    _, text = _read_text(ctx.workspace, path)
    # splitlines is also what truncate() counts with, so the offsets we suggest line up with its cuts.
    lines = text.splitlines(keepends=True)
    if not lines:
        return "(empty file)"
    if offset > len(lines):
        raise ToolError(f"offset {offset} is past the end of {path!r}, which has {len(lines)} lines")
    end = len(lines) if limit is None else min(len(lines), offset - 1 + limit)
    chosen = lines[offset - 1:end]
    body = "".join(chosen)
    first = truncate(body, keep="head")
    if first.truncated:
        # No omitted lines means the first line alone passed the byte cap and was cut inside itself.
        kept = len(chosen) - first.omitted_lines if first.omitted_lines else 1
        return truncate(body, keep="head", hint=f"call read_file with offset={offset + kept} to read on").text
    if end < len(lines):
        sep = "" if body.endswith("\n") else "\n"
        more = len(lines) - end
        return f"{body}{sep}[... {more} more lines; call read_file with offset={end + 1} to read on]\n"
    return body


@tool
def write_file(path: str, content: str, ctx: ToolContext) -> str:
    """Create or overwrite a file in the workspace with `content` (UTF-8). Missing folders are created.

    Args:
        path: File path relative to the workspace root.
        content: The complete new text of the file.
    """
    real = resolve_in_workspace(ctx.workspace, path)
    if real.is_dir():
        raise ToolError(f"{path!r} is a directory; give a file path")
    existed = real.exists()
    data = content.encode("utf-8")
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        real.write_bytes(data)
    except OSError as e:
        raise ToolError(f"cannot write {path!r}: {e.strerror or e}") from None
    verb = "overwrote" if existed else "created"
    return f"{verb} {_display(ctx.workspace, real)} ({len(data)} bytes)"


@tool
def edit_file(path: str, old: str, new: str, ctx: ToolContext) -> ToolResult:
    """Replace one exact occurrence of `old` with `new` in a file. Read the file first.

    Args:
        path: File path relative to the workspace root.
        old: Text to replace, copied exactly (whitespace and indentation too); must occur exactly once.
        new: Replacement text.
    """
    if not old:
        raise ToolError("old is empty; give the exact text to replace (to create a file use write_file)")
    if old == new:
        raise ToolError("old and new are the same; nothing would change")
    real, text = _read_text(ctx.workspace, path)
    count = text.count(old)
    if count == 0 and "\r\n" in text and "\r\n" not in old:
        # The model writes "\n" even when the file uses Windows line endings; match those too.
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        count = text.count(old)
    if count == 0:
        raise ToolError(
            f"old was not found in {path!r}; it must match exactly, including whitespace, indentation and "
            "line breaks. Call read_file to see the current text and copy it from there"
        )
    if count > 1:
        raise ToolError(
            f"old occurs {count} times in {path!r}; include more surrounding lines in old so it matches "
            "exactly once"
        )
    after = text.replace(old, new, 1)
    try:
        real.write_bytes(after.encode("utf-8"))
    except OSError as e:
        raise ToolError(f"cannot write {path!r}: {e.strerror or e}") from None
    name = _display(ctx.workspace, real)
    diff = "".join(difflib.unified_diff(
        text.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{name}", f"b/{name}", n=3,
    ))
    old_n, new_n = len(old.splitlines()) or 1, len(new.splitlines()) or 1
    return ToolResult(f"edited {name}: replaced {old_n} line(s) with {new_n}", details={"diff": diff})


@tool
def list_files(ctx: ToolContext, pattern: str = "**/*") -> str:
    """List files in the workspace matching a glob pattern, one relative path a line; folders end in '/'.

    Args:
        pattern: Glob relative to the workspace root: '*' within a folder, '**' across folders,
            e.g. 'src/**/*.py'. The default lists everything.
    """
    parts = Path(pattern).parts
    if not pattern.strip() or Path(pattern).is_absolute() or ".." in parts:
        raise ToolError(
            f"pattern {pattern!r} must be relative to the workspace and must not contain '..'; e.g. '**/*.py'"
        )
    root = ctx.workspace.resolve()
    found: list[str] = []
    try:
        for p in root.glob(pattern):
            rel = p.relative_to(root)
            if not rel.parts or SKIP_DIRS.intersection(rel.parts):
                continue
            real = Path(os.path.realpath(p))
            if not real.is_relative_to(root):
                continue  # a symlink leading out of the workspace
            found.append(rel.as_posix() + ("/" if real.is_dir() else ""))
    except (ValueError, NotImplementedError) as e:
        raise ToolError(f"pattern {pattern!r} is not a valid glob: {e}") from None
    except OSError as e:
        raise ToolError(f"cannot list {pattern!r}: {e.strerror or e}") from None
    if not found:
        return f"no files match {pattern!r}"
    found.sort()
    if len(found) > MAX_LIST:
        note = f"[... showing {MAX_LIST} of {len(found)} matches; use a narrower pattern, e.g. 'src/**/*.py']"
        return "\n".join([*found[:MAX_LIST], note])
    return "\n".join(found)
