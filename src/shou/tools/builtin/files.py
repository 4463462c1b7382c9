"""File tools confined to the workspace: `read_file`, `write_file`, `edit_file`, `list_files`.

Every path is opened through `shou.workspace`: one component at a time from the workspace's folder,
never following a symlink, so neither `..`, an absolute path, a symlink nor a folder swapped for a symlink
mid-call can lead a tool outside. Only regular files are read and written; files with other hard links and
anything under `.shou/` are never written. `list_files` walks the tree itself (`globbing.py`: no symlink
followed, the walk bounded, the pattern matched without a backtracking regex).

One exception, for reading only: `read_file` also reads the files of a skill in the user's skills folder
(`<config dir>/skills/NAME/...`, spelled as the absolute path `use_skill` lists), since a person installed
those skills for the agent to use. Nothing else outside the workspace is readable (`shou.skills`).
"""

from __future__ import annotations

import difflib
import os
import re

from ...errors import ToolError
from ...workspace import (
    Opened,
    config_matcher,
    in_config,
    open_beneath,
    open_file,
    relative_parts,
    write_bytes_beneath,
    write_lock,
)
from ..base import ToolContext, ToolResult, tool
from ..globbing import Glob, Walk
from ..linewindow import read_window
from ..spills import check_readable

__all__ = ["edit_file", "list_files", "read_file", "write_file"]

# edit_file holds the file, its edited copy and their encodings at once: a few times this per call.
MAX_EDIT_BYTES = 8 * 1024 * 1024
MAX_LIST = 1000
MAX_SCAN = 100_000  # entries list_files looks at before it stops and asks for a narrower pattern
SCAN_SECONDS = 5.0
SKIP_DIRS = frozenset({".git", ".shou"})
_SNIFF_BYTES = 8192


def _decode(shown: str, data: bytes) -> str:
    if b"\0" in data[:_SNIFF_BYTES]:
        raise ToolError(f"{shown!r} looks like a binary file ({len(data)} bytes); read_file only reads text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{shown!r} is not UTF-8 text ({len(data)} bytes); read_file only reads UTF-8") from None


@tool(idempotent=True)
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
    # A window, not the file: a file of any size costs about a chunk and the window (tools/linewindow.py).
    with _open_for_reading(ctx, path) as f:
        return read_window(f.fd, f.shown, offset, limit)


def _open_for_reading(ctx: ToolContext, path: str) -> Opened:
    """The workspace file `path`, or else the file of a user skill an absolute `path` names (read-only)."""
    try:
        parts = relative_parts(ctx.workspace, path)
    except ToolError:  # outside the workspace: only what the context allows (a user skill's file) may be read
        outside = ctx.read_outside(path) if ctx.read_outside is not None else None
        if outside is None:
            raise
        return outside
    check_readable(ctx.resource_key, list(parts))
    return open_file(ctx.workspace, path)


@tool
def write_file(path: str, content: str, ctx: ToolContext) -> str:
    """Create or overwrite a file in the workspace with `content` (UTF-8). Missing folders are created.

    Args:
        path: File path relative to the workspace root.
        content: The complete new text of the file.
    """
    data = content.encode("utf-8")
    shown = "/".join(relative_parts(ctx.workspace, path))
    try:
        with write_lock(ctx.workspace, path):
            if ctx.checkpoint is not None:  # the prior content is on disk before the file changes (shou undo)
                ctx.checkpoint.before(path, data)
            existed = write_bytes_beneath(ctx.workspace, path, data)
            if ctx.checkpoint is not None:
                ctx.checkpoint.after(path)
    except OSError as e:
        raise ToolError(f"cannot write {shown!r}: {e.strerror or e}") from None
    return f"{'overwrote' if existed else 'created'} {shown} ({len(data)} bytes)"


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
    with write_lock(ctx.workspace, path), open_file(ctx.workspace, path, write=True) as f:
        result = _edit(f, path, old, new, ctx)
        if ctx.checkpoint is not None:
            ctx.checkpoint.after(path)
        return result


def _edit(f: Opened, path: str, old: str, new: str, ctx: ToolContext) -> ToolResult:
    if f.stat.st_size > MAX_EDIT_BYTES:
        raise ToolError(f"{f.shown!r} is {f.stat.st_size} bytes; edit_file edits files of at most {MAX_EDIT_BYTES} "
                        "bytes (it holds the whole file while it edits). Change a file that large another way")
    text = _decode(f.shown, f.read(MAX_EDIT_BYTES))
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
    data = after.encode("utf-8")
    if ctx.checkpoint is not None:  # the prior content is on disk before the file changes (shou undo)
        ctx.checkpoint.before(path, data)
    try:
        f.replace(data)
    except OSError as e:
        raise ToolError(f"cannot write {path!r}: {e.strerror or e}") from None
    name = f.shown
    diff = _local_diff(name, text, after, text.index(old), len(old), len(new))
    old_n, new_n = len(old.splitlines()) or 1, len(new.splitlines()) or 1
    return ToolResult(f"edited {name}: replaced {old_n} line(s) with {new_n}", details={"diff": diff})


_LINE = re.compile(r"[^\n]*\n|[^\n]+$")
_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@", re.MULTILINE)


def _local_diff(name: str, text: str, after: str, at: int, old_len: int, new_len: int, context: int = 3) -> str:
    """The unified diff of one replacement at `at`, made from the changed lines and their context only: a
    diff of the whole file would cost time and memory in the file's size, not the change's."""
    lo = text.rfind("\n", 0, at) + 1
    for _ in range(context):
        if lo == 0:
            break
        lo = text.rfind("\n", 0, lo - 1) + 1
    hi = text.find("\n", at + old_len)  # the line after old too: new may join it
    hi = len(text) if hi < 0 else hi + 1
    for _ in range(context):
        if hi >= len(text):
            break
        nl = text.find("\n", hi)
        hi = len(text) if nl < 0 else nl + 1
    before_lines = _LINE.findall(text[lo:hi])
    after_lines = _LINE.findall(after[lo:hi + new_len - old_len])
    diff = "".join(difflib.unified_diff(before_lines, after_lines, f"a/{name}", f"b/{name}", n=context))
    skipped = text.count("\n", 0, lo)  # the lines above the slice: hunk headers count from the file's start

    def shift(m: re.Match[str]) -> str:
        return f"@@ -{int(m[1]) + skipped}{m[2] or ''} +{int(m[3]) + skipped}{m[4] or ''} @@"

    return _HUNK.sub(shift, diff)


@tool(idempotent=True)
def list_files(ctx: ToolContext, pattern: str = "**/*") -> str:
    """List files in the workspace matching a glob pattern, one relative path a line; folders end in '/',
    symlinks in '@' (the file tools do not follow them).

    Args:
        pattern: Glob relative to the workspace root: '*' within a folder, '**' across folders,
            e.g. 'src/**/*.py'. The default lists everything.
    """
    if next((p for p in pattern.split("/") if p not in ("", ".")), "").lower() == ".shou":
        return f"no files match {pattern!r} (.shou/ is shou's own state; the output of a call names its file)"
    if not pattern.strip() or pattern.startswith("/") or ".." in pattern.split("/"):
        raise ToolError(
            f"pattern {pattern!r} must be relative to the workspace and must not contain '..'; e.g. '**/*.py'"
        )
    try:
        glob = Glob.parse(pattern)
    except ValueError as e:
        raise ToolError(f"pattern {pattern!r} is not a valid glob: {e}") from None
    if in_config(ctx.workspace, glob.fixed):
        return f"no files match {pattern!r} (shou's user configuration folder is not the file tools' to show)"
    try:
        start = open_beneath(ctx.workspace, glob.fixed, os.O_RDONLY | os.O_DIRECTORY) if glob.fixed else \
            os.open(ctx.workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except ToolError:
        return f"no files match {pattern!r}"
    walk = Walk(glob, limit=MAX_SCAN, seconds=SCAN_SECONDS, skip=SKIP_DIRS,
                skip_paths=config_matcher(ctx.workspace))
    walk.run(start)
    found = sorted(walk.found)
    if walk.stopped:
        found.append(f"[... stopped after looking at {walk.seen} entries ({walk.stopped}); use a narrower pattern, "
                     "e.g. 'src/**/*.py']")
    if not found:
        return f"no files match {pattern!r}"
    if len(walk.found) > MAX_LIST:
        note = f"[... showing {MAX_LIST} of {len(walk.found)} matches; use a narrower pattern, e.g. 'src/**/*.py']"
        return "\n".join([*found[:MAX_LIST], note])
    return "\n".join(found)
