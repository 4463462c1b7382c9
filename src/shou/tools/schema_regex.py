"""Regular expressions of JSON schemas, in linear time: a schema can come from outside (an MCP server's tool),
and Python's `re` takes exponential time on a pattern such as `^(a+)+$` (one call froze the event loop for
58 s). `install()` makes `jsonschema` (shou's own validation, and the MCP SDK's check of results against a
tool's output schema) search `pattern` and `patternProperties` with RE2 (`google-re2`, the `mcp` extra).

A pattern RE2 cannot run (a lookaround, a backreference: not linear) is refused with `UnsafePattern` rather
than run by `re`; `safe_schema` takes such patterns out of a schema from outside before it is used, and bounds
its size and depth.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from ..jsonfile import depth

__all__ = ["MAX_SCHEMA_BYTES", "MAX_SCHEMA_DEPTH", "UnsafePattern", "install", "safe_schema", "unsafe_pattern"]

MAX_SCHEMA_BYTES = 64_000  # of a tool's schema as JSON: it goes to the model with every request, too
MAX_SCHEMA_DEPTH = 32


class UnsafePattern(ValueError):
    """A schema's pattern that cannot be searched in linear time."""


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    import re2

    try:
        return re2.compile(pattern)
    except re2.error as e:
        raise UnsafePattern(f"the pattern {pattern[:80]!r} cannot be checked in linear time ({e})") from None


class _LinearRe:
    """What `jsonschema` uses of the `re` module, with `search` in RE2."""

    error = re.error
    compile = staticmethod(re.compile)  # for the `regex` format check: compiling is not the slow part

    @staticmethod
    def search(pattern: str, string: str, flags: int = 0) -> Any:
        return _compiled(pattern).search(string)

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)


def available() -> bool:
    """Whether RE2 is installed."""
    try:
        import re2  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def install() -> bool:
    """Make `jsonschema` search patterns with RE2 (once); False when RE2 is not installed (nothing changes)."""
    if not available():
        return False
    import jsonschema._keywords
    import jsonschema._legacy_keywords
    import jsonschema._utils

    shim = _LinearRe()
    for module in (jsonschema._keywords, jsonschema._legacy_keywords, jsonschema._utils):
        if getattr(module, "re", None) is re:
            module.re = shim  # type: ignore[attr-defined]
    return True


def safe_schema(schema: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """A schema from outside, made safe to validate with: (the schema, "") with the patterns RE2 cannot run
    taken out (every pattern, when RE2 is not installed), or (None, why) when it is too big or too deep."""
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError, RecursionError):
        return None, "its input schema is not plain JSON"
    if size > MAX_SCHEMA_BYTES:
        return None, f"its input schema is {size:,} bytes (the most is {MAX_SCHEMA_BYTES:,})"
    if depth(schema) > MAX_SCHEMA_DEPTH:
        return None, f"its input schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
    linear = install()
    return _without_unsafe(schema, linear), ""


def unsafe_pattern(schema: Any, linear: bool) -> str | None:
    """Why `schema` cannot be checked in linear time (its first `pattern` or `patternProperties` key RE2 cannot
    run; any, when `linear` is False: RE2 is not installed), or None. For a schema whose owner is told instead
    of the pattern being left out (`safe_schema`): an output schema. Every value is looked through, `enum`'s and
    `const`'s too: a property may be named `enum`, and refusing an odd constant is better than missing a
    pattern."""
    if isinstance(schema, list):
        return next((why for v in schema if (why := unsafe_pattern(v, linear)) is not None), None)
    if not isinstance(schema, dict):
        return None
    for key, item in schema.items():
        if key == "pattern" and isinstance(item, str):
            found = [item]
        elif key == "patternProperties" and isinstance(item, dict):
            found = list(item)
        else:
            found = []
        for pattern in found:
            if not linear:
                return f"the pattern {pattern[:80]!r} cannot be checked in linear time (google-re2 is not installed)"
            try:
                _compiled(pattern)
            except UnsafePattern as e:  # its message has RE2's reason: a lookaround, a backreference, ...
                return str(e)
        if (why := unsafe_pattern(item, linear)) is not None:
            return why
    return None


def _checkable(pattern: Any, linear: bool) -> bool:
    if not linear or not isinstance(pattern, str):
        return False
    try:
        _compiled(pattern)
    except UnsafePattern:
        return False
    return True


def _without_unsafe(value: Any, linear: bool) -> Any:
    """`value` with every `pattern` and `patternProperties` entry RE2 cannot run left out."""
    if isinstance(value, list):
        return [_without_unsafe(v, linear) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key == "pattern" and isinstance(item, str):
            if _checkable(item, linear):
                out[key] = item
        elif key == "patternProperties" and isinstance(item, dict):
            out[key] = {k: _without_unsafe(v, linear) for k, v in item.items() if _checkable(k, linear)}
        else:
            out[key] = _without_unsafe(item, linear)
    return out
