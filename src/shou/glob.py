"""Glob matching in linear time, as `fnmatch.fnmatchcase` reads patterns (`*`, `?`, `[...]`, `[!...]`).

`fnmatch` turns a pattern into one regular expression, which backtracks: `*a*a*a*a*a*b` against a
megabyte of `a` takes half a minute. The model chooses the text a permission rule is matched against, so
that would let it stall the process. Here the pattern is cut at its stars into fixed-length pieces; the
first is anchored at the start, the last at the end, and each one between is found at its leftmost place
after the one before, which is correct for star-separated pieces and never backtracks.
"""

from __future__ import annotations

import fnmatch
import functools
import re

__all__ = ["glob_could_start", "glob_match"]


def _pieces(pattern: str) -> tuple[list[tuple[re.Pattern[str], int]], bool, bool, bool]:
    """The pattern's star-free pieces as (regex, length), and whether it starts and ends with a star. Each
    piece is translated by fnmatch itself (without a star it cannot backtrack), so classes and ranges mean
    exactly what they mean there."""
    pieces: list[tuple[re.Pattern[str], int]] = []
    start = units = 0
    i, n = 0, len(pattern)
    starts = ends = starred = False

    def close(stop: int) -> None:
        nonlocal units
        if units:
            translated = fnmatch.translate(pattern[start:stop])
            pieces.append((re.compile(translated.removesuffix("\\Z")), units))
            units = 0

    while i < n:
        c = pattern[i]
        if c == "*":
            close(i)
            starred = True
            starts = starts or i == 0
            while i < n and pattern[i] == "*":
                i += 1
            ends = i == n
            start = i
            continue
        ends = False
        i += 1
        if c == "[":  # a class is one character, as fnmatch reads it (no closing bracket: a literal "[")
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j < n:
                i = j + 1
        units += 1
    close(n)
    return pieces, starts, ends, starred


_compiled = functools.lru_cache(maxsize=1024)(_pieces)


def glob_match(text: str, pattern: str) -> bool:
    """Whether `text` matches `pattern` (case-sensitive), as `fnmatch.fnmatchcase` says, in linear time."""
    pieces, starts, ends, starred = _compiled(pattern)
    if not pieces:
        return starred or text == ""  # "*" matches anything; "" only the empty text
    if not starred:
        regex, length = pieces[0]
        return len(text) == length and regex.fullmatch(text) is not None
    pos, end = 0, len(text)
    first, last = 0, len(pieces)
    if not starts:
        regex, length = pieces[0]
        if regex.match(text, 0) is None:
            return False
        pos, first = length, 1
    if not ends:
        if first >= last:  # the one piece was anchored at the start; it must also end the text
            return pos == end
        regex, length = pieces[-1]
        if end - length < pos or regex.fullmatch(text, end - length) is None:
            return False
        end, last = end - length, last - 1
    for regex, _ in pieces[first:last]:
        found = regex.search(text, pos, end)
        if found is None:
            return False
        pos = found.end()
    return pos <= end


def _tokens(pattern: str) -> list[re.Pattern[str] | None]:
    """The pattern as one token per character it matches (a regex for one character), None for a star."""
    out: list[re.Pattern[str] | None] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern[i] == "*":
            out.append(None)
            i += 1
            continue
        j = i + 1
        if pattern[i] == "[":  # as _pieces reads a class; without a closing bracket a literal "["
            k = j + (j < n and pattern[j] == "!")
            k += k < n and pattern[k] == "]"
            while k < n and pattern[k] != "]":
                k += 1
            if k < n:
                j = k + 1
        out.append(re.compile(fnmatch.translate(pattern[i:j])))
        i = j
    return out


def glob_could_start(start: str, pattern: str) -> bool:
    """Whether some text beginning with `start` matches `pattern`: the pattern is followed along `start`; a star
    reached takes any rest, and a pattern still alive at its end can be finished by some text. Each state
    without a star advances a character at a time, so at most len(pattern) + 1 characters are looked at."""
    tokens = _tokens(pattern)

    def closure(states: set[int]) -> set[int]:
        out = set(states)
        for i in sorted(states):
            while i < len(tokens) and tokens[i] is None:
                i += 1
                out.add(i)
        return out

    states = closure({0})
    for c in start:
        if any(i < len(tokens) and tokens[i] is None for i in states):
            return True
        states = closure({i + 1 for i in states if i < len(tokens) and (t := tokens[i]) is not None and t.match(c)})
        if not states:
            return False
    return True
