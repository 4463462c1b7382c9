"""A shell line as tree-sitter-bash parses it, for shou.shellwords' walk: the parser, bounded in work, the
record a reading fills (Found) and the budget it spends, and the command words the grammar hangs on a redirect
given back to their command.

It stands alone because it is what the walk stands on and calls nothing of it: how the tree is obtained and
paid for, and where its grammar puts words bash reads elsewhere, apart from which programs the line runs
(shou.shellwords) and which of those run others (shou.shellprograms).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from .bashwords import node_text

__all__ = ["Found", "Word"]

PARSE_READS_PER_BYTE = 32

Word = tuple[str | None, str]  # (the word as bash reads it, or None when only the running line knows; the text)


@dataclass
class Found:
    """The commands of a line (each `program arg...`, the program by its name) and, when some program
    cannot be known statically, why (`opaque`)."""

    commands: list[str] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)
    # Commands known only up to a word the running line makes (`git $a x`, `xargs git`'s input): each as its
    # known start, `git `; a rule that some command with that start could match matches it.
    partial: list[str] = field(default_factory=list)
    budget: int = 0  # work left (nodes visited, characters of commands recorded); see _spend


class _Exhausted(Exception):
    """The line needs more work to read than any honest line does (a deliberate parser DoS)."""


def _spend(found: Found, cost: int) -> None:
    found.budget -= cost
    if found.budget < 0:
        raise _Exhausted


def _record(found: Found, command: str) -> None:
    _spend(found, len(command) + 1)
    found.commands.append(command)


@functools.cache
def _parser() -> Any:
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def _partial(found: Found, known: list[str]) -> None:
    """Record a command whose words after `known` only the running line knows (see Found.partial)."""
    start = " ".join(known) + " "
    _spend(found, len(start))
    found.partial.append(start)


def _parse(source: bytes) -> Any:
    """The parsed tree of `source`, or `_Exhausted` past a work bound linear in its size: tree-sitter's error
    recovery is quadratic on some input (`x[a][a]...` took seconds). The parser re-reads the text as it
    works, so it is fed a byte at a time and the reads counted (an honest line takes under ten per byte);
    past the bound it is told the text ended."""
    reads, limit, parsed = 0, PARSE_READS_PER_BYTE * len(source) + 10_000, False

    def read(offset: int, _point: Any) -> bytes:
        nonlocal reads
        if parsed:  # a node's text is read through this too: whole, and never cut short (it would never end)
            return source[offset:offset + 256]
        reads += 1
        return b"" if reads > limit else source[offset:offset + 1]

    tree = _parser().parse(read)
    if reads > limit:
        raise _Exhausted
    parsed = True
    return tree.root_node


_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_FD_WORD = re.compile(r"[0-9]+|\{[A-Za-z_][A-Za-z0-9_]*\}")  # `2>f`, `{fd}>f`: the redirect's descriptor


def _redirect_words(redirect: Any) -> list[Any]:
    """The words tree-sitter-bash hangs on a redirect that are not its own target: bash reads every word after a
    redirect's target as the command's next argument (`git 2>&1 push` runs `git push`; `cmd <<E rm x` runs
    `cmd rm x`), but the grammar makes them extra `destination`s of the redirect or `argument`s of a here-document."""
    words: list[Any] = []
    # `2<&-` and `>&-` close a descriptor and have no target: every word after them is the command's
    closes = any(c.type in ("<&-", ">&-") for c in redirect.children)
    targets = 1 if closes else 0
    for i, child in enumerate(redirect.children):
        fieldname = redirect.field_name_for_child(i)
        if child.type in _REDIRECTS:
            words += _redirect_words(child)
        elif fieldname == "destination":
            targets += 1
            if targets > 1 or redirect.type != "file_redirect":
                words.append(child)
        elif fieldname == "argument":
            words.append(child)
    return words


def _redirects(node: Any) -> list[Any]:
    """Every redirect among `node`'s children, and those nested in them (a here-document's `>out`)."""
    out = []
    for child in node.children:
        if child.type in _REDIRECTS:
            out += [child, *_redirects(child)]
    return out


def _place_redirected_words(statement: Any, extra: dict[int, list[Any]], found: Found) -> None:
    """Give the words a redirect of `statement` holds (see _redirect_words) to the command they belong to: the
    statement's body, or the last command of a list or pipeline the grammar put under the redirect
    (`a && git >f push` redirects and runs `git push`). Where no such command is found, the line is opaque."""
    words = [w for r in statement.children_by_field_name("redirect") for w in _redirect_words(r)]
    if not words:
        return
    target = statement.child_by_field_name("body")
    if target is None:  # `2>&1 git push`: only redirects, the command all in their words
        extra[statement.id] = words
        return
    while target is not None and target.type in ("list", "pipeline", "negated_command") and target.named_child_count:
        target = target.named_children[-1]
    if target is None or target.type != "command":
        found.opaque.append(f"{node_text(words[0])}: words after a redirect shou cannot place")
        return
    extra.setdefault(target.id, []).extend(words)
