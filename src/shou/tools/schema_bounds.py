"""Validation against a schema from outside (an MCP server's tool) that cannot freeze shou.

`jsonschema` checks `uniqueItems` by comparing every pair of items when they cannot be sorted (objects):
9000 small objects held the event loop for 70 s, and `shou serve` answered nothing meanwhile, `/healthz`
included. Two bounds: `install()` makes that check linear (each item reduced to a hashable key with JSON
Schema's equality: `1 == 1.0`, `true != 1`), and `checked_off_loop` runs any validation in a worker thread
awaited with a deadline, so whatever else a schema makes slow stalls one call, which then ends with a clear
error, and never the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ValidationTimeout", "checked_off_loop", "install", "linear_uniq"]

T = TypeVar("T")


class ValidationTimeout(RuntimeError):
    """Checking a value against a schema from outside took longer than its deadline."""


def _key(value: Any) -> Any:
    """A hashable key equal for values JSON Schema calls equal (and only for those)."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", int(value) if isinstance(value, float) and value.is_integer() else value)
    if isinstance(value, str):
        return ("s", value)
    if value is None:
        return ("z",)
    if isinstance(value, dict):
        return ("d", frozenset((k, _key(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("l", tuple(_key(v) for v in value))
    raise TypeError(type(value).__name__)


def linear_uniq(container: Any, _quadratic: Callable[[Any], bool] | None = None) -> bool:
    """Whether all of `container`'s items are unique, in linear time (jsonschema's `uniq`, which is
    quadratic on items it cannot sort). Values that are not JSON fall back to jsonschema's own check."""
    seen: set[Any] = set()
    try:
        for item in container:
            key = _key(item)
            if key in seen:
                return False
            seen.add(key)
    except TypeError:
        if _quadratic is None:
            raise
        return _quadratic(container)
    return True


@functools.cache
def install() -> None:
    """Make `jsonschema`'s `uniqueItems` check linear (once)."""
    import jsonschema._keywords
    import jsonschema._utils

    original = jsonschema._utils.uniq
    fast = functools.partial(linear_uniq, _quadratic=original)
    for module in (jsonschema._keywords, jsonschema._utils):
        if getattr(module, "uniq", None) is original:
            module.uniq = fast  # type: ignore[attr-defined]


async def checked_off_loop(check: Callable[[], T], seconds: float, what: str) -> T:
    """`check()` run in a daemon thread, awaited for at most `seconds`; `ValidationTimeout` past that.

    A thread cannot be stopped: one that overruns is left to finish on its own (daemon: it never holds up the
    exit), but the loop, and every other request, goes on at once."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            (future.set_result if ok else future.set_exception)(value)

    def work() -> None:
        try:
            outcome: tuple[bool, Any] = (True, check())
        except BaseException as e:  # handed to the awaiting task, which raises it
            outcome = (False, e)
        with contextlib.suppress(RuntimeError):  # the loop closed while this overran: nobody waits any more
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=work, name="shou-schema-check", daemon=True).start()
    try:
        async with asyncio.timeout(seconds):
            return await future
    except TimeoutError:
        raise ValidationTimeout(f"checking {what} against the server's schema took longer than {seconds:g} s; "
                                "it was given up") from None
