"""JSON an operator gives shou in a file (a case file, a memory export, a model script, an output schema).

`json.loads` recurses once per level, so a file of 100,000 `[` is a `RecursionError`, which no caller's
`except ValueError` catches: a traceback instead of an error naming the file. And a value the parser just
managed can still be too deep for what reads it next (a schema validator, a walk over every string). So the
depth is bounded here, once for every such file, at more than any real one needs.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_DEPTH", "depth", "load_json"]

MAX_DEPTH = 100


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
