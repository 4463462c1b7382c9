"""A session's interpreter stays marked as holding outside content when it is retired and made again, until
the session is deleted; one in a sandbox with the network is marked from the start."""

from __future__ import annotations

import pytest

from shou.sandbox import stateful
from shou.sandbox.base import Limits


class UnstartedSandbox:
    """Only the bookkeeping is under test: no interpreter is started."""

    def __init__(self, network: bool = False) -> None:
        self.limits = Limits(network=network)

    async def start(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("started")


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stateful, "_KERNELS", {})
    monkeypatch.setattr(stateful, "_USED", {})
    monkeypatch.setattr(stateful, "_TAINTED", set())


async def test_the_mark_outlives_a_retired_interpreter_until_the_session_is_deleted() -> None:
    sb = UnstartedSandbox()
    first = stateful.kernel_for(sb, "s0")
    assert not first.tainted
    first.taint()
    for i in range(1, stateful.MAX_KERNELS + 1):  # s0 is the least recently used: retired
        stateful.kernel_for(sb, f"s{i}")
    again = stateful.kernel_for(sb, "s0")
    assert again is not first and again.tainted
    assert not stateful.kernel_for(sb, "s1").tainted  # other sessions are not
    await stateful.close_session("s0")
    assert not stateful.kernel_for(sb, "s0").tainted  # a new session of the same name starts clean


def test_an_interpreter_that_can_reach_the_network_is_marked_from_the_start() -> None:
    assert stateful.kernel_for(UnstartedSandbox(network=True), "s").tainted
    assert not stateful.kernel_for(UnstartedSandbox(network=False), "t").tainted
