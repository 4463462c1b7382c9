"""The one truncation helper: line and byte caps, head/tail/both, and the note."""

from __future__ import annotations

import pytest

from shou.tools.truncate import truncate


def test_short_text_is_untouched() -> None:
    t = truncate("a\nb\n")
    assert (t.text, t.truncated) == ("a\nb\n", False)


@pytest.mark.parametrize("keep", ["head", "tail", "both"])
def test_line_cap(keep: str) -> None:
    text = "".join(f"{i}\n" for i in range(100))
    t = truncate(text, max_lines=10, keep=keep, hint="read on")
    assert t.omitted_lines == 90 and "90 lines" in t.text and "read on" in t.text
    assert t.text.startswith("0\n") == (keep != "tail")
    assert t.text.endswith("99\n") == (keep != "head")


@pytest.mark.parametrize("keep", ["head", "tail", "both"])
def test_one_enormous_line_is_cut_by_characters_not_dropped(keep: str) -> None:
    text = "x" * 200_000
    t = truncate(text, max_bytes=1000, keep=keep)
    assert t.truncated and t.text.count("x") >= 1000 * (0.5 if keep == "both" else 1)
    assert "bytes omitted" in t.text and len(t.text) < 1200


def test_byte_cap_counts_utf8() -> None:
    text = "字\n" * 5000  # 4 bytes a line
    t = truncate(text, max_bytes=400, keep="head")
    assert len(t.text.encode()) < 600 and t.omitted_lines == 5000 - 100
