"""Validation against a schema from outside is bounded (shou.tools.schema_bounds): uniqueItems in linear
time with JSON Schema's equality, and a check that overruns its deadline gives up without holding the loop."""

from __future__ import annotations

import asyncio
import threading
import time

import jsonschema
import pytest

from shou.tools.schema_bounds import ValidationTimeout, checked_off_loop, install, linear_uniq


def test_linear_uniq_keeps_json_schema_equality() -> None:
    assert linear_uniq([{"a": i} for i in range(50_000)])
    assert not linear_uniq([{"a": 1, "b": [1, 2]}, {"b": [1.0, 2], "a": 1}])  # 1 == 1.0, key order ignored
    assert linear_uniq([1, True]) and linear_uniq([0, False]) and linear_uniq([[1], [True]])  # true is not 1
    assert not linear_uniq(["x", "y", "x"]) and linear_uniq([None, "None", 0])


def test_unique_items_of_many_objects_is_checked_quickly() -> None:
    install()
    validator = jsonschema.Draft202012Validator({"type": "array", "uniqueItems": True})
    started = time.process_time()
    assert validator.is_valid([{"a": i} for i in range(20_000)])  # quadratic: minutes; linear: a blink
    assert not validator.is_valid([{"a": 1}, {"a": 1}])
    assert time.process_time() - started < 30  # a generous bound: it is ~0.1 s, the quadratic check ~100 s


def test_a_check_past_its_deadline_frees_the_loop() -> None:
    release = threading.Event()

    async def main() -> tuple[str, bool]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        tick = asyncio.create_task(ticker())
        with pytest.raises(ValidationTimeout) as e:
            await checked_off_loop(release.wait, 0.2, "the result")  # blocks until released: never in time
        tick.cancel()
        return str(e.value), ticks > 0

    message, loop_ran = asyncio.run(main())
    release.set()
    assert "longer than 0.2 s" in message and loop_ran


def test_a_check_returns_its_value_and_raises_its_error() -> None:
    async def main() -> None:
        assert await checked_off_loop(lambda: 42, 60, "x") == 42
        with pytest.raises(RuntimeError, match="bad"):
            await checked_off_loop(lambda: (_ for _ in ()).throw(RuntimeError("bad")), 60, "x")

    asyncio.run(main())
