"""Stateful interpreters do not outlive their use: least recently used past a cap, idle ones, and those of
a deleted session are stopped (each holds a process and memory; a server has many sessions)."""

from __future__ import annotations

import asyncio

from shou.sandbox import stateful
from shou.sandbox.base import Limits


class FakeSandbox:
    limits = Limits()

    async def start(self, *args: object, **kwargs: object) -> None:  # never called: no code runs here
        raise AssertionError("started")


async def test_kernels_are_capped_idle_ones_retired_and_a_deleted_session_loses_its_own(monkeypatch) -> None:
    monkeypatch.setattr(stateful, "_KERNELS", {})
    monkeypatch.setattr(stateful, "_USED", {})
    sb = FakeSandbox()
    first = stateful.kernel_for(sb, "s0")
    for i in range(1, stateful.MAX_KERNELS + 1):
        stateful.kernel_for(sb, f"s{i}")
    assert len(stateful._KERNELS) == stateful.MAX_KERNELS
    assert (id(sb), "s0") not in stateful._KERNELS  # the least recently used went
    assert stateful.kernel_for(sb, "s0") is not first  # a fresh one: nothing of the old state
    again = stateful.kernel_for(sb, "s5")
    assert stateful.kernel_for(sb, "s5") is again  # in use: kept
    await stateful.close_session("s5")
    assert (id(sb), "s5") not in stateful._KERNELS and stateful.kernel_for(sb, "s5") is not again
    monkeypatch.setattr(stateful, "IDLE_SECONDS", 0.0)
    await asyncio.sleep(0.01)
    stateful.kernel_for(sb, "fresh")
    assert list(stateful._KERNELS) == [(id(sb), "fresh")]  # every idle one retired
