"""shou.markup: untrusted text in rich markup, escaped and printed in time linear in its length."""

from __future__ import annotations

import io
import random
import re

import pytest
import rich.markup
from rich.console import Console

from shou.markup import escape

RICH_TAGS = re.compile(r"((\\*)\[([a-z#/@][^[]*?)])")  # rich.markup.RE_TAGS as rich writes it


def test_escape_and_the_parser_s_search_are_rich_s_on_every_short_text() -> None:
    # the same escaped text and the same tags found as rich's own, over every mix of the characters that matter
    rng = random.Random(7)
    alphabet = ["\\", "[", "]", "a", "/", "#", "@", " ", "Z", "b"]
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
        assert escape(text) == rich.markup.escape(text)
        assert [m.span() for m in rich.markup.RE_TAGS.finditer(text)] == [m.span() for m in RICH_TAGS.finditer(text)]
    assert escape("[bold]x[/]") == r"\[bold]x\[/]" and escape("a\\") == "a\\\\" and escape("\\[b]") == "\\\\\\[b]"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("tail", ["", " done", "[b] x", "[/x] y", "[", "[ done", "[a"])
def test_a_long_run_of_backslashes_is_escaped_and_printed_in_linear_time(tail: str) -> None:
    # rich's escape and parser tried `(\\*)\[` at every backslash of the run, each try going through the rest of
    # it: minutes for 200,000 (`shou trust` of a .env, `shou show` of a model's answer)
    run = "\\" * 200_000
    escaped = escape(run + tail)
    tag = tail[:1] == "[" and re.match(r"\[[a-z#/@][^[]*?]", tail)
    assert escaped == (run * 2 + "\\" + tail if tag else run + tail)  # rich's escape: a tag's run doubled
    out = Console(file=io.StringIO(), width=80, highlight=False, soft_wrap=True)
    out.print(f"[bold]{escaped}[/] .", end="")
    printed = out.file.getvalue()  # type: ignore[attr-defined]
    if tag or tail == " done":
        assert printed == run + tail + " ."
    else:  # rich prints "\\[" of no tag as "[", and a run before its closing tag as half: still all read, at once
        assert printed.endswith(tail + " .") and printed.count("\\") >= 100_000
