"""Untrusted text in rich markup, in time linear in its length.

`rich.markup.escape` and rich's markup parser both search with `(\\*)\\[...`: tried at every backslash of a
run, the `\\*` takes the rest of the run and gives it back one at a time, so a run of n backslashes costs n²
steps. A `.env` value or a model's answer of 40,000 backslashes kept `shou trust` and `shou show` busy for
most of a minute. A match can only begin where a run begins (from anywhere inside it, the run's start would
have matched the same text first), so the same search that skips positions right after a backslash finds the
same matches in linear time. `escape` is rich's with that search; `linear_markup()` puts the same search in
rich's parser, which every `console.print` of markup runs over the escaped text again.
"""

from __future__ import annotations

import re

__all__ = ["escape", "linear_markup"]

# rich's, from a run's first backslash only: (?<!\\) ends at once each try that the run's start made already
_TAG_AFTER_RUN = re.compile(r"(?<!\\)(\\*)(\[[a-z#/@][^[]*?])")
_RICH_TAGS = r"((\\*)\[([a-z#/@][^[]*?)])"  # rich.markup.RE_TAGS as rich writes it
_LINEAR_TAGS = re.compile(r"(?<!\\)" + _RICH_TAGS)


def _double(match: re.Match[str]) -> str:
    backslashes, tag = match.groups()
    return f"{backslashes}{backslashes}\\{tag}"


def escape(text: str) -> str:
    """`text` as rich markup that prints it as it is (what `rich.markup.escape` gives, in linear time)."""
    text = _TAG_AFTER_RUN.sub(_double, text)
    if text.endswith("\\") and not text.endswith("\\\\"):
        return text + "\\"
    return text


def linear_markup() -> None:
    """Have rich's markup parser search for tags in linear time (the same matches; see the module). Left as
    it is when a rich of another version writes the search otherwise: its matches might then differ."""
    import rich.markup

    if rich.markup.RE_TAGS.pattern == _RICH_TAGS:
        rich.markup.RE_TAGS = _LINEAR_TAGS


linear_markup()
