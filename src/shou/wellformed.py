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
    """A JSON value (dicts, lists, strings, scalars) with every string, keys included, made well-formed (the same
    object when nothing needs it). Walked with a stack of its own: JSON's parser takes nesting ~1,000 deep, and
    a walk that recursed two frames a level (review 49: a model's plan nested 600 deep) raised RecursionError."""
    kind = type(value)
    if kind is str:
        return well_formed_text(value)
    if not (kind is dict or kind is list or kind is tuple) or not ill_formed(value):
        return value
    # Post-order: a container is made once all it holds is (a tuple can only be made then).
    root: list[Any] = []
    stack: list[tuple[Any, Any, list[Any], Any]] = [(value, iter(_items(value)), [], (root, None))]
    while stack:
        source, items, made, (into, key) = stack[-1]
        for k, v in items:
            kv = type(v)
            if kv is dict or kv is list or kv is tuple:
                stack.append((v, iter(_items(v)), [], (made, k)))
                break
            made.append((k, well_formed_text(v) if kv is str else v))
        else:
            stack.pop()
            kind = type(source)
            whole = {well_formed_text(k) if type(k) is str else k: v for k, v in made} if kind is dict else \
                kind(v for _, v in made)
            into.append((key, whole))
    return root[0][1]


def _items(value: Any) -> Any:
    return value.items() if type(value) is dict else enumerate(value)


def ill_formed(value: Any) -> bool:
    """Whether a JSON value holds a string (or key) with a lone surrogate (walked with a stack of its own)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str:
            if well_formed_text(item) is not item:
                return True
        elif kind is dict:
            for k, v in item.items():
                if type(k) is str and well_formed_text(k) is not k:
                    return True
                stack.append(v)
        elif kind is list or kind is tuple:
            stack.extend(item)
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
