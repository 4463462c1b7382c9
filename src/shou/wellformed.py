"""Text that is valid Unicode: a lone surrogate becomes U+FFFD.

Python strings may hold lone surrogates (U+D800-U+DFFF) that no UTF-8 encodes: a file name's undecodable
bytes as `os.listdir` gives them (`surrogateescape`), a command's output decoded the same way, an argument
on the command line, or a provider's JSON `"\\ud800"` (the `json` module takes it; `orjson` does not). Such
text cannot be logged, sent to a model, streamed nor printed, so it is repaired where it enters: every event
on its way to the log (`shou.agent.emitter`) and a provider's reply as it is parsed.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["ill_formed", "well_formed", "well_formed_json", "well_formed_text"]


def well_formed_text(text: str) -> str:
    """`text` with each lone surrogate replaced by one U+FFFD, and a surrogate pair written as two code points
    joined into the character it spells (the same object when there is nothing to repair)."""
    if text.isascii():  # the usual answer, and cheap: streamed fragments ask it one by one
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def well_formed(value: Any) -> Any:
    """A JSON value (dicts, lists, strings, scalars) with every string, keys included, made well-formed."""
    kind = type(value)
    if kind is str:
        return well_formed_text(value)
    if kind is dict:
        return {well_formed_text(k) if type(k) is str else k: well_formed(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return kind(well_formed(v) for v in value)
    return value


def ill_formed(value: Any) -> bool:
    """Whether a JSON value holds a string (or key) with a lone surrogate. Nested past the interpreter's limit
    it raises `RecursionError`, as the parser that made it would have."""
    kind = type(value)
    if kind is str:
        return well_formed_text(value) is not value
    if kind is dict:
        return any((type(k) is str and well_formed_text(k) is not k) or ill_formed(v) for k, v in value.items())
    if kind is list or kind is tuple:
        return any(ill_formed(v) for v in value)
    return False


# In JSON text, left to right: an escaped backslash (kept), a surrogate pair's two escapes (kept: one
# character), or a lone surrogate's escape (made U+FFFD's)
_ESCAPES = re.compile(r"(\\\\)|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
                      r"|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})")


def well_formed_json(text: str) -> str:
    """JSON text whose escapes spell a lone surrogate (`"\\udcff"`: ASCII, and valid JSON) with U+FFFD's escape
    there instead, done on the text in one pass: a value nested however deep is neither parsed nor walked."""
    if "\\u" not in text:
        return text
    return _ESCAPES.sub(lambda m: "\\ufffd" if m.group(2) else m.group(0), text)
