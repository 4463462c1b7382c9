"""A window of a text file's lines, read without loading the file: what `read_file` shows.

The file is streamed in binary chunks from its start. Newlines are counted (b"\\n" ends a line, so "\\r\\n"
does too) to find the first line asked for; only the window's bytes are kept and decoded; the rest of the
asked range is counted, not kept, for the note that says how to read on. So one call holds about a chunk
plus the window whatever the file's size, and however many calls run at once, memory does not depend on
what is asked. Every scan is capped (`MAX_SCAN_BYTES`): past it the note says where counting stopped.
Between chunks the scan checks that its caller still waits (`threads.check_stop`): a call that timed out
stops working instead of running on, unseen, on its thread.
"""

from __future__ import annotations

import codecs
import os
from dataclasses import dataclass

from ..errors import ToolError
from .threads import check_stop
from .truncate import MAX_BYTES, MAX_LINES

__all__ = ["MAX_SCAN_BYTES", "read_window"]

CHUNK = 1 << 20
WINDOW_CHUNK = 64 << 10
MAX_SCAN_BYTES = 256 << 20  # bytes one call scans to find its first line, and again to count what follows
SNIFF_BYTES = 8192


@dataclass(frozen=True, slots=True)
class _Count:
    """Lines (a last one without a newline included) and bytes from a position on, and whether the count
    reached its end (False: the scan cap stopped it)."""

    lines: int
    size: int
    complete: bool

    def said(self, what: str) -> str:
        return f"{self.lines} {what}" if self.complete else f"at least {self.lines} {what}"


def read_window(fd: int, shown: str, offset: int, limit: int | None, *, max_lines: int = MAX_LINES,
                max_bytes: int = MAX_BYTES, scan: int | None = None) -> str:
    """Lines `offset`.. (at most `limit`, and at most `max_lines` / about `max_bytes` bytes) of the open file
    `fd`, with a note saying how to read on when anything was left out; `ToolError` for a binary or
    non-UTF-8 window or an offset past the end (or past the scan cap, `MAX_SCAN_BYTES` unless `scan`)."""
    scan = MAX_SCAN_BYTES if scan is None else scan
    head = os.pread(fd, SNIFF_BYTES, 0)
    if b"\0" in head:
        raise ToolError(f"{shown!r} looks like a binary file ({os.fstat(fd).st_size} bytes); read_file only "
                        "reads text")
    start = _seek_line(fd, shown, offset, scan)
    want = max_lines if limit is None else min(limit, max_lines)
    buf, eof = _fill(fd, start, want, max_bytes)
    if not buf:
        if start == 0:
            return "(empty file)"
        raise ToolError(f"offset {offset} is past the end of {shown!r}, which has {offset - 1} lines")
    end, lines = _fit(buf, want, max_bytes, eof)
    if not lines:  # the first line alone is over the cap: show its start, cut where a character ends
        text = _decode(shown, buf[:max_bytes], final=False)
        rest = _count(fd, start + len(text.encode("utf-8")), limit, scan)
        size = f"{rest.size}" if rest.complete else f"at least {rest.size}"
        return f"{text}\n[... {size} bytes omitted; call read_file with offset={offset + 1} to read on ...]\n"
    text = _decode(shown, buf[:end], final=True)
    asked_rest = None if limit is None else limit - lines
    if asked_rest != 0:
        rest = _count(fd, start + end, asked_rest, scan)
        if rest.lines:
            sep = "" if text.endswith("\n") else "\n"
            return (f"{text}{sep}[... {rest.said('lines')} ({rest.size} bytes) omitted; call read_file with "
                    f"offset={offset + lines} to read on ...]\n")
        return text
    more = _count(fd, start + end, None, scan)
    if more.lines:
        sep = "" if text.endswith("\n") else "\n"
        return f"{text}{sep}[... {more.said('more lines')}; call read_file with offset={offset + lines} to read on]\n"
    return text


def _seek_line(fd: int, shown: str, offset: int, scan: int) -> int:
    """The byte position where line `offset` starts (the end of the file when it has fewer lines)."""
    pos, line = 0, 1
    while line < offset:
        check_stop()
        if pos >= scan:
            raise ToolError(f"offset {offset} is too far into {shown!r}: read_file scans at most the first {scan} "
                            f"bytes for the line to start at, and that is only line {line}")
        chunk = os.pread(fd, min(CHUNK, scan - pos), pos)
        if not chunk:
            if not pos:
                return 0  # an empty file: the caller says so, whatever the offset
            lines = line - 1 if _ends_line(fd, pos) else line
            raise ToolError(f"offset {offset} is past the end of {shown!r}, which has {lines} lines")
        n = chunk.count(b"\n")
        if line + n < offset:
            line += n
            pos += len(chunk)
            continue
        i = -1
        for _ in range(offset - line):
            i = chunk.index(b"\n", i + 1)
        return pos + i + 1
    return pos


def _ends_line(fd: int, pos: int) -> bool:
    return os.pread(fd, 1, pos - 1) == b"\n"


def _fill(fd: int, start: int, want: int, max_bytes: int) -> tuple[bytes, bool]:
    """Bytes from `start`: enough for `want` lines, or just past `max_bytes`, or to the end (then True)."""
    parts: list[bytes] = []
    size = newlines = 0
    while newlines < want and size <= max_bytes:
        chunk = os.pread(fd, WINDOW_CHUNK, start + size)
        if not chunk:
            return b"".join(parts), True
        parts.append(chunk)
        size += len(chunk)
        newlines += chunk.count(b"\n")
    return b"".join(parts), False


def _fit(buf: bytes, want: int, max_bytes: int, eof: bool) -> tuple[int, int]:
    """How many bytes and whole lines of `buf` fit in `want` lines and `max_bytes` bytes."""
    end = lines = 0
    while lines < want:
        nl = buf.find(b"\n", end)
        if nl < 0:
            if not (eof and end < len(buf)):  # a line that goes on past what was read, or nothing left
                break
            nl = len(buf) - 1  # the file's last line, without a newline
        if nl + 1 > max_bytes:
            break
        end, lines = nl + 1, lines + 1
    return end, lines


def _decode(shown: str, data: bytes, *, final: bool) -> str:
    try:
        return codecs.getincrementaldecoder("utf-8")().decode(data, final=final)
    except UnicodeDecodeError:
        raise ToolError(f"{shown!r} is not UTF-8 text; read_file only reads UTF-8") from None


def _count(fd: int, pos: int, most: int | None, scan: int) -> _Count:
    """The lines from `pos` on (at most `most` of them) and their bytes, counting at most `scan` bytes."""
    lines = size = 0
    last = b"\n"
    while most is None or lines < most:
        check_stop()
        if size >= scan:
            return _Count(lines, size, False)
        chunk = os.pread(fd, min(CHUNK, scan - size), pos + size)
        if not chunk:
            return _Count(lines + (last != b"\n"), size, True)
        n = chunk.count(b"\n")
        if most is not None and lines + n >= most:
            i = -1
            for _ in range(most - lines):
                i = chunk.index(b"\n", i + 1)
            return _Count(most, size + i + 1, True)
        lines += n
        size += len(chunk)
        last = chunk[-1:]
    return _Count(lines, size, True)
