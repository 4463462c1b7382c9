"""One empty dict for every fold table that holds nothing yet.

Every in-flight session has its folds, and most of their tables stay empty for a whole run (questions,
approvals, loaded skills, a turn's results before its first call ends): one shared empty dict instead of one
each (issue 35). Reading, popping and clearing it are what an empty dict does; filling it is a bug, so a fold
takes a dict of its own first (`owned`).
"""

from __future__ import annotations

from typing import Any, NoReturn, TypeVar

__all__ = ["VACANT", "owned"]

K = TypeVar("K")
V = TypeVar("V")


class _Vacant(dict[Any, Any]):
    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("VACANT is every fold's empty table: take a dict of its own first (owned())")

    __setitem__ = update = setdefault = __ior__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> str:
        return "VACANT"  # copied or pickled, still the one shared empty table


VACANT: dict[Any, Any] = _Vacant()


def owned(table: dict[K, V]) -> dict[K, V]:
    """`table` to add to: a new dict when it is the shared empty one."""
    return {} if type(table) is _Vacant else table
