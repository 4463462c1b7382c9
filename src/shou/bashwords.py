"""Words of a bash syntax tree (tree-sitter-bash) as bash reads them: quotes and escapes removed, or None
where the word depends on the running shell (an expansion, a substitution), and the names an arithmetic
expression's text evaluates. shou.shellwords reads a line's programs with these."""

from __future__ import annotations

import codecs
import itertools
import re
from typing import Any

__all__ = ["UNKNOWN_OPERAND", "BraceUnreadable", "arith_operands", "brace_words", "globbed", "node_text",
           "quoted_word", "redirect_text", "static_word", "stdin_of"]

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


MAX_BRACE_WORDS = 1024  # words one brace expansion may make; more is unreadable
MAX_BRACES, MAX_BRACED_WORD = 32, 2048  # unquoted `{` in a word, and its length with one; more is unreadable
_SEQUENCE = re.compile(r"(-?[0-9]+|[A-Za-z])\.\.(-?[0-9]+|[A-Za-z])(?:\.\.(-?[0-9]+))?")

Marked = list[tuple[str, bool]]  # a word's characters, each with whether quoting makes it literal


class BraceUnreadable(Exception):
    """A brace expansion makes more words than MAX_BRACE_WORDS, or is one of bash's quirks shou does not model."""


def brace_words(nodes: list[Any]) -> list[tuple[str | None, str]] | None:
    """The words bash makes by brace expansion of the one word `nodes` spell together (`r{m,}` is `rm r`,
    `pu{s,}h` is `push puh`), each as (the word as bash reads it or None, its text), or None when they hold no
    unquoted brace expansion.
    Raises BraceUnreadable past MAX_BRACE_WORDS or at a quirk (see _group). Bash expands braces before anything
    else, on the word's unquoted characters only: `"{a,b}"` and `\\{a,b}` stay one word."""
    marked: Marked = []
    dynamic = False
    for node in nodes:
        part, d = _marked(node)
        marked += part
        dynamic = dynamic or d
    braces = sum(1 for c, lit in marked if c == "{" and not lit)
    if not braces:
        return None
    # Bounds that keep the expansion's work small (each brace may rescan the word): honest words are far below.
    if braces > MAX_BRACES or len(marked) > MAX_BRACED_WORD:
        raise BraceUnreadable
    words = _expand(marked)
    if len(words) == 1 and words[0] == marked:
        return None
    # A word left with no character, not even a quoted empty one (`{,rm}` makes `` and `rm`), is no word.
    texts = ["".join(c for c, _ in w) for w in words if w]
    # With a part only the running shell knows, each word's text (its expansion unexpanded) is what rules see.
    return [(None, t) if dynamic else (t, t) for t in texts]


def _marked(node: Any) -> tuple[Marked, bool]:
    """`node`'s characters as bash reads them, marked literal where quoted or escaped; and whether some part is
    only known at run time (kept as its source text, literal)."""
    kind, text = node.type, node_text(node)
    if kind == "word":
        out: Marked = []
        text = text.replace("\\\n", "")
        i = 0
        while i < len(text):
            if text[i] == "\\" and i + 1 < len(text):
                out.append((text[i + 1], True))
                i += 2
            else:
                out.append((text[i], False))
                i += 1
        return out, False
    if kind in ("number", "brace_expression"):
        return [(c, False) for c in text], False
    if kind in ("concatenation", "command_name"):
        out, dynamic = [], False
        for child in node.children:
            part, d = _marked(child)
            out += part
            dynamic = dynamic or d
        return out, dynamic
    word = static_word(node)
    if word == "":
        return [("", True)], False  # `""{,b}`: the quoted empty part keeps its word
    return [(c, True) for c in (text if word is None else word)], word is None


def _expand(word: Marked) -> list[Marked]:
    """Bash's brace expansion of one word: the first `{...}` holding a top-level comma or a sequence `a..b`
    becomes its alternatives, each with the rest of the word expanded in turn."""
    for open_at, (c, literal) in enumerate(word):
        if c != "{" or literal:
            continue
        found = _group(word, open_at)
        if found is None:
            continue  # `{a}`, no closing brace: a later `{` may still open an expansion (`{{a,b}` is `{a {b`)
        close, commas = found
        inner = word[open_at + 1:close]
        if commas:
            bounds = [open_at, *commas, close]
            alternatives = [word[a + 1:b] for a, b in itertools.pairwise(bounds)]
        else:
            alternatives = _sequence(inner) or []
        head, tail = word[:open_at], _expand(word[close + 1:])
        out: list[Marked] = []
        for alternative in alternatives:
            for middle in _expand(alternative):
                for rest in tail:
                    out.append(head + middle + rest)
                    if len(out) > MAX_BRACE_WORDS:
                        raise BraceUnreadable
        return out
    return [word]


def _group(word: Marked, open_at: int) -> tuple[int, list[int]] | None:
    """Where the brace opened at `open_at` closes and where its top-level commas are, or None when it is no
    expansion (it never closes, or holds neither a comma nor a sequence). Raises BraceUnreadable where bash's
    own scan differs and is not modelled: it looks on past a `}` whose group is no expansion (`{b},,}` is
    `b} ` ``), and past a `}` right after the opening brace."""
    depth, commas = 0, []
    for j in range(open_at, len(word)):
        ch, lit = word[j]
        if lit:
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth:
                continue
            inner = word[open_at + 1:j]
            if (commas or _sequence(inner) is not None) and j > open_at + 1:
                if commas and ".." in "".join(c for c, lit in inner if not lit):
                    raise BraceUnreadable
                return j, commas
            plain = "".join(c for c, lit in inner if not lit)
            if any(c == "}" and not lit for c, lit in word[j + 1:]) or (".." in plain and "{" in plain):
                raise BraceUnreadable  # and `x{..{a,b}}` is `x..a x..b`: bash drops a failed sequence's braces
            return None
        elif ch == "," and depth == 1:
            commas.append(j)
    return None


def _sequence(inner: Marked) -> list[Marked] | None:
    """`{1..3}`, `{a..c}`, `{1..9..2}` as bash expands them, or None when `inner` is no sequence."""
    if any(lit for _, lit in inner):
        return None
    m = _SEQUENCE.fullmatch("".join(c for c, _ in inner))
    if m is None:
        return None
    a, b, step = m.group(1), m.group(2), abs(int(m.group(3) or 1)) or 1
    if a.lstrip("-").isdigit() != b.lstrip("-").isdigit():
        return None
    if a.lstrip("-").isdigit():
        lo, hi = int(a), int(b)
        if abs(hi - lo) // step > MAX_BRACE_WORDS:
            raise BraceUnreadable
        width = max(len(a), len(b)) if (a.lstrip("-").startswith("0") or b.lstrip("-").startswith("0")) else 0
        values = [str(v).zfill(width) for v in range(lo, hi + (1 if hi >= lo else -1), step if hi >= lo else -step)]
    else:
        lo, hi = ord(a), ord(b)
        values = [chr(v) for v in range(lo, hi + (1 if hi >= lo else -1), step if hi >= lo else -step)]
    return [[(c, False) for c in v] for v in values]


# An arithmetic expression's text (shou.shellarith): the names it evaluates.
_ARITH_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TARGET = re.compile(r"\s*(?:\[[^\]]{0,256}\])?\s*=(?!=)")  # after a name `=` assigns: `x = 1`, `a[i]=1`
UNKNOWN_OPERAND = "\0"  # a use that is never safe (a substitution, a positional parameter, a glob)
_DOLLAR = re.compile(r"[A-Za-z_]\w*|[#?$!]")  # `$x`, `$#`
_NUMBER = re.compile(r"[0-9A-Za-z@_#]*")  # `0x1f`, `16#ff`, `64#a@_`
_BRACED = re.compile(r"([A-Za-z_]\w*|[#?$!])|([A-Za-z_]\w*)\[([^\[\]]*)\]")  # `${x}`, `${#x}`, `${a[i]}`


def arith_operands(text: str, out: list[tuple[str, int]]) -> None:
    """The names an arithmetic expression's text evaluates (a name, `$x`, `${x}`, `x[...]`; not a name `=` assigns,
    whose subscript is read on), each with where it ends, and UNKNOWN_OPERAND for what no line shows (a substitution, a
    positional parameter, an expansion with operators)."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith(("$((", "$["), i):
            i += 3 if text[i + 1] == "(" else 2  # a nested arithmetic expansion: its text is read on
        elif text.startswith(("$(", "<(", ">("), i) or c == "`":
            out.append((UNKNOWN_OPERAND, i))
            return
        elif text.startswith("${", i):
            i = _braced(text, i, out)
        elif c == "$":
            m = _DOLLAR.match(text, i + 1)
            if m:
                out.append((m.group(), m.end()))
                i = m.end()
            elif i + 1 < n and (text[i + 1].isdigit() or text[i + 1] in "@*-_"):
                out.append((UNKNOWN_OPERAND, i))
                return
            else:
                i += 1
        elif c.isdigit():
            m = _NUMBER.match(text, i)
            i = m.end() if m else i + 1  # `0x1f`, `16#ff`, `64#a@_` are numbers
        elif c.isalpha() or c == "_":
            m = _ARITH_NAME.match(text, i)
            assert m is not None
            if not _TARGET.match(text, m.end()):
                out.append((m.group(), m.end()))
            i = m.end()
        else:
            i += 1


def _braced(text: str, i: int, out: list[tuple[str, int]]) -> int:
    """Read the `${...}` at `i` of an arithmetic text (see arith_operands); where it ends."""
    n = len(text)
    depth, j = 1, i + 2
    while j < n and depth:
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    inner = text[i + 2:j - 1] if not depth else text[i + 2:]
    m = _BRACED.fullmatch(inner[1:] if inner.startswith("#") and len(inner) > 1 else inner)
    if m and inner.startswith("#") and len(inner) > 1:
        if m.group(3):  # a length is a number; `${#a[i]}` evaluates i
            arith_operands(m.group(3), out)
    elif m and m.group(1):
        out.append((m.group(1), j))
    elif m:  # `${a[i]}`: a's element, its subscript evaluated (it holds no brackets: read once more)
        out.append((m.group(2), j))
        arith_operands(m.group(3), out)
    else:
        out.append((UNKNOWN_OPERAND, i))
    return j
