"""The built-in suites: folders of cases shipped with shou (`shou eval --suite NAME`)."""

from __future__ import annotations

from pathlib import Path

from ...errors import UserError

__all__ = ["BUILTIN", "builtin_suite"]

BUILTIN = ("seeds",)


def builtin_suite(name: str) -> Path:
    """The folder of the built-in suite `name`."""
    if name not in BUILTIN:
        raise UserError(f"no built-in suite {name!r}; there is {', '.join(BUILTIN)}")
    return Path(__file__).parent / name
