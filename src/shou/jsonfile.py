"""JSON an operator gives shou in a file (a case file, a memory export, a model script, an output schema).

`json.loads` recurses once per level, so a file of 100,000 `[` is a `RecursionError`, which no caller's
`except ValueError` catches: a traceback instead of an error naming the file. And a value the parser just
managed can still be too deep for what reads it next (a schema validator, a walk over every string). So the
depth is bounded here, once for every such file, at more than any real one needs.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_DEPTH", "canonical", "depth", "load_json", "loads"]

MAX_DEPTH = 100

_scan = json.JSONDecoder().scan_once  # json.loads's own C scanner, as its default decoder has it
_space = json.decoder.WHITESPACE.match
_JSON_SPACE = " \t\n\r"


def loads(text: str) -> Any:
    """`json.loads(text)`: the same value, or the same error at the same place, for a third of the cost. A tool
    call's arguments are parsed several times (approvals, validation, the repeat guard), and `json.loads` spends
    ~13,000 instructions on a short object, two thirds of them around its C scanner (three Python frames, two
    regular-expression matches for white space a model's arguments never start or end with)."""
    if not text or text[0] in _JSON_SPACE or text[0] == "\ufeff" or text[-1] in _JSON_SPACE:
        return json.loads(text)  # white space around the value, or a byte-order mark: json.loads's own way
    try:
        value, end = _scan(text, 0)
    except StopIteration as err:
        raise json.JSONDecodeError("Expecting value", text, err.value) from None
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, _space(text, end).end())
    return value


# `json.dumps(value, sort_keys=True, separators=(",", ":"))` without making an encoder at each call (~half its cost)
canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def depth(value: Any) -> int:
    """How deep lists and objects nest in a JSON value (a scalar: 0), found without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list | tuple):
            level += 1
            deepest = max(deepest, level)
            stack.extend((v, level) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def load_json(text: str | bytes, *, max_depth: int = MAX_DEPTH, **options: Any) -> Any:
    """`json.loads(text, **options)`, or a `ValueError` when it is not JSON or nests deeper than `max_depth`
    levels (a `RecursionError` from the parser becomes that same `ValueError`)."""
    try:
        value = json.loads(text, **options)
    except RecursionError:
        raise ValueError(f"nests deeper than {max_depth} levels of lists and objects") from None
    if depth(value) > max_depth:
        raise ValueError(f"nests deeper than {max_depth} levels of lists and objects")
    return value
