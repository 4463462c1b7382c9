"""The one truncation helper: line and byte caps, and a note saying what was cut and how to get more."""

from __future__ import annotations

from dataclasses import dataclass

MAX_LINES = 2000
MAX_BYTES = 50_000


@dataclass(frozen=True, slots=True)
class Truncated:
    """Text after truncation; `omitted_lines`/`omitted_bytes` are zero when nothing was cut."""

    text: str
    omitted_lines: int = 0
    omitted_bytes: int = 0

    @property
    def truncated(self) -> bool:
        """Whether anything was cut."""
        return self.omitted_lines > 0 or self.omitted_bytes > 0


def truncate(
    text: str, *, max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES, keep: str = "both", hint: str = ""
) -> Truncated:
    """Cut `text` to at most `max_lines` lines and about `max_bytes` UTF-8 bytes.

    `keep` chooses what survives: `"head"` (files: the start matters), `"tail"` (logs: the end matters)
    or `"both"` (tool output: head and tail, the middle dropped). The cut is marked in the text with a
    note that ends with `hint` (e.g. how to read the rest).
    """
    size = len(text.encode("utf-8", "replace")) if len(text) * 4 > max_bytes else len(text)
    lines = text.splitlines(keepends=True)
    if len(lines) <= max_lines and size <= max_bytes:
        return Truncated(text)
    if keep == "head":
        kept_head, kept_tail = _take(lines, max_lines, max_bytes), []
    elif keep == "tail":
        kept_head, kept_tail = [], _take(lines[::-1], max_lines, max_bytes)[::-1]
    else:
        kept_head = _take(lines, max_lines // 2, max_bytes // 2)
        kept_tail = _take(lines[len(kept_head):][::-1], max_lines - max_lines // 2, max_bytes // 2)[::-1]
    omitted = lines[len(kept_head): len(lines) - len(kept_tail)]
    omitted_lines = len(omitted)
    omitted_bytes = sum(len(x.encode("utf-8", "replace")) for x in omitted)
    if not omitted_lines or not (kept_head or kept_tail):  # a line over the cap: cut by characters instead
        half = max_bytes // 2 if keep == "both" else max_bytes
        head = text[:half] if keep != "tail" else ""
        tail = text[-half:] if keep != "head" else ""
        omitted_bytes = len(text.encode("utf-8", "replace")) - len((head + tail).encode("utf-8", "replace"))
        note = f"\n[... {omitted_bytes} bytes omitted{'; ' + hint if hint else ''} ...]\n"
        return Truncated(head + note + tail, 0, max(omitted_bytes, 0))
    note = f"[... {omitted_lines} lines ({omitted_bytes} bytes) omitted{'; ' + hint if hint else ''} ...]\n"
    head_text = "".join(kept_head)
    if head_text and not head_text.endswith("\n"):
        head_text += "\n"
    return Truncated(head_text + note + "".join(kept_tail), omitted_lines, omitted_bytes)


def _take(lines: list[str], max_lines: int, max_bytes: int) -> list[str]:
    out: list[str] = []
    used = 0
    for line in lines[:max_lines]:
        n = len(line.encode("utf-8", "replace"))
        if used + n > max_bytes:
            break
        out.append(line)
        used += n
    return out
