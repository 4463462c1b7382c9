"""Words of a bash syntax tree (tree-sitter-bash) as bash reads them: quotes and escapes removed, or None
where the word depends on the running shell (an expansion, a substitution). shou.shellwords reads a
line's programs with these."""

from __future__ import annotations

import codecs
import re
from typing import Any

__all__ = ["globbed", "node_text", "quoted_word", "redirect_text", "static_word", "stdin_of"]

GLOB = re.compile(r"(?<!\\)(?:[*?]|\[[^\]]+\])")  # `[` alone is the test command, no pattern


def node_text(node: Any) -> str:
    """The source text of `node` (lone surrogates kept, as the line was encoded)."""
    return node.text.decode("utf-8", "surrogatepass")


def static_word(node: Any) -> str | None:
    """A word as bash reads it, or None when it depends on the running shell (expansions, substitutions)."""
    kind, text = node.type, node_text(node)
    if kind == "word":
        return re.sub(r"\\(.)", r"\1", text.replace("\\\n", ""), flags=re.S)
    if kind == "number":
        return text
    if kind == "raw_string":
        return text[1:-1]
    if kind == "ansi_c_string":
        try:  # bash ends the string at a NUL (`$'rm\\0'` is `rm`)
            return codecs.decode(text[2:-1], "unicode_escape").split("\0", 1)[0]
        except (UnicodeDecodeError, ValueError):
            return None
    if kind in ("string", "translated_string"):
        return quoted_word(node)
    if kind in ("concatenation", "command_name"):
        pieces = [static_word(c) for c in node.children]
        return None if any(p is None for p in pieces) else "".join(p or "" for p in pieces)
    return None


def quoted_word(node: Any) -> str | None:
    """A double-quoted string's text, or None when it holds an expansion or a substitution."""
    parts = []
    for child in node.children:
        if child.type in ('"', '$"'):
            continue
        if child.type != "string_content":
            return None
        parts.append(re.sub(r'\\([$`"\\])', r"\1", node_text(child).replace("\\\n", "")))
    return "".join(parts)


def globbed(node: Any) -> bool:
    """Whether an unquoted glob character makes the word depend on the files there (`/bin/r?`)."""
    if node.type == "word":
        return bool(GLOB.search(node_text(node)))
    return any(globbed(c) for c in node.children if c.type in ("word", "concatenation"))


def stdin_of(node: Any) -> list[Any]:
    """The here-strings and here-documents given to the command `node`."""
    found = [c for c in node.children if c.type == "herestring_redirect"]
    parent = node.parent
    if parent is not None and parent.type == "redirected_statement":
        found += [c for c in parent.children if c.type in ("herestring_redirect", "heredoc_redirect")]
    return found


def redirect_text(redirect: Any) -> str | None:
    """The script a here-string or quoted here-document feeds a shell, or None when the outer shell expands it
    first (an unquoted here-document) or it is not static."""
    if redirect.type == "heredoc_redirect":
        start = next((c for c in redirect.children if c.type == "heredoc_start"), None)
        if start is None or not re.search(r"['\"\\]", node_text(start)):
            return None  # `<<E`: the outer shell expands the body (`\``, `$(...)`, `\r\m`) before the shell reads it
        body = next((c for c in redirect.children if c.type == "heredoc_body"), None)
        return "" if body is None else node_text(body)
    value = next((c for c in reversed(redirect.children) if c.type not in ("<<<",)), None)
    return None if value is None else static_word(value)
