"""Agents made again from the same arguments share one frozen config (making it was most of an Agent's making),
and never when sharing could give a stale one: other objects, a changed tools list, a changed environment's
secrets, a mutable container among the fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from shou import Agent, tool
from shou.models.scripted import ScriptedModel


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"


@tool
def pong() -> str:
    """Answer ping."""
    return "ping"


def test_the_same_arguments_share_a_config_and_others_do_not(tmp_path: Path) -> None:
    model, tools = ScriptedModel([{"text": "x"}]), [ping]
    a, b = Agent(model, tools, "be brief", workspace=tmp_path), Agent(model, tools, "be brief", workspace=tmp_path)
    assert a.config is b.config and a is not b
    assert Agent(model, tools, "be long", workspace=tmp_path).config is not a.config
    assert Agent(ScriptedModel([{"text": "x"}]), tools, "be brief", workspace=tmp_path).config is not a.config
    assert Agent(model, tools, "be brief", workspace=tmp_path, max_steps=3).config is not a.config
    tools.append(pong)  # the same list, other contents: another config, offering both
    assert Agent(model, tools, "be brief", workspace=tmp_path).tools.names == ["ping", "pong"]


def test_a_mutable_field_is_never_shared(tmp_path: Path) -> None:
    model, seen = ScriptedModel([{"text": "x"}]), []
    observers = [seen.append]
    first = Agent(model, [ping], observers=observers, workspace=tmp_path)
    observers.append(print)
    assert len(Agent(model, [ping], observers=observers, workspace=tmp_path).config.observers) == 2
    assert len(first.config.observers) == 1


def test_a_secret_set_in_the_environment_is_redacted_by_the_next_agent(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    model = ScriptedModel([{"text": "x"}])
    before = Agent(model, [ping], workspace=tmp_path)
    monkeypatch.setenv("SHARED_TEST_API_KEY", "sk-shared-test-0123456789abcdef")
    after = Agent(model, [ping], workspace=tmp_path)
    assert after.config is not before.config
    assert "sk-shared-test" not in after.redactor.text("key sk-shared-test-0123456789abcdef")


def test_a_secret_changed_in_place_is_redacted_and_an_unchanged_environment_shares(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = ScriptedModel([{"text": "x"}])
    monkeypatch.setenv("SHARED_TEST_API_KEY", "sk-first-value-0123456789abcdef")
    first = Agent(model, [ping], workspace=tmp_path)
    assert Agent(model, [ping], workspace=tmp_path).config is first.config  # nothing changed: shared
    monkeypatch.setenv("SHARED_TEST_API_KEY", "sk-other-value-0123456789abcdef")  # same name, same count
    second = Agent(model, [ping], workspace=tmp_path)
    assert second.config is not first.config
    assert "sk-other-value" not in second.redactor.text("key sk-other-value-0123456789abcdef")
    monkeypatch.setenv("SHARED_TEST_API_KEY", "sk-other-value-0123456789abcdef")  # set again, equal: shared
    assert Agent(model, [ping], workspace=tmp_path).config is second.config
