"""The cyclic collector is off while `run`, `resume` and `chat` start, and on again once the agent is built."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from shou.cli import app as app_module
from shou.cli import build
from shou.errors import UserError


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()


def test_off_until_the_agent_is_built_then_on(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []

    def fake_build(opts: build.Options, open_store: bool) -> tuple[str, str]:
        seen.append(gc.isenabled())
        return "agent", "settings"

    monkeypatch.setattr(build, "_build_agent", fake_build)
    with build.startup_gc(True):
        assert not gc.isenabled()
        assert build.build_agent(build.Options()) == ("agent", "settings")
        assert gc.isenabled()  # the task's work runs with the collector on
    assert seen == [False]
    assert gc.isenabled()


def test_on_again_when_building_fails_or_the_command_never_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(opts: build.Options, open_store: bool) -> None:
        raise UserError("no model")

    monkeypatch.setattr(build, "_build_agent", broken)
    with build.startup_gc(True), pytest.raises(UserError):
        build.build_agent(build.Options())
    assert gc.isenabled()
    with pytest.raises(SystemExit), build.startup_gc(True):  # a bad flag: the command exits before building
        assert not gc.isenabled()
        raise SystemExit(2)
    assert gc.isenabled()


def test_left_alone_when_not_asked_or_already_off() -> None:
    with build.startup_gc(False):
        assert gc.isenabled()
    gc.disable()  # the embedding program turned it off: shou must not turn it on
    with build.startup_gc(True):
        pass
    build._end_startup_gc()
    assert not gc.isenabled()


@pytest.mark.parametrize(("argv", "off"), [(["run", "x"], True), (["resume"], True), (["chat"], True),
                                           (["sessions"], False), (["serve"], False), ([], False)])
def test_which_commands_start_with_it_off(monkeypatch: pytest.MonkeyPatch, argv: list[str], off: bool) -> None:
    seen: list[bool] = []
    monkeypatch.setattr("sys.argv", ["shou", *argv])
    monkeypatch.setattr(app_module, "app", lambda **kw: seen.append(gc.isenabled()))
    app_module.main()
    assert seen == [not off]
    assert gc.isenabled()
