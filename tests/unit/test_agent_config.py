"""AgentConfig: one frozen value; variants by `replace` leave their parent alone; `narrow` only lowers;
`from_settings` is what the CLI builds; settings.py imports nothing above the foundation layer."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shou import Agent, AgentSpec, ScriptedModel, tool
from shou.agent.config import NARROWABLE, AgentConfig, narrow
from shou.agent.delegate import child_config
from shou.agent.subrun import sub_config
from shou.errors import UserError

SRC = Path(__file__).resolve().parents[2] / "src" / "shou"


@tool
def note(text: str) -> str:
    """Keep a note."""
    return f"noted {text}"


def _config(**fields: object) -> AgentConfig:
    return AgentConfig(ScriptedModel([{"text": "hi"}]), [note], **fields)  # type: ignore[arg-type]


def test_a_config_is_frozen() -> None:
    config = _config(max_steps=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_steps = 50  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.tools = config.tools  # type: ignore[misc]
    with pytest.raises(TypeError):  # its tables are read-only views: a variant cannot change its parent's
        config.agents["x"] = AgentSpec()  # type: ignore[index]
    assert config.max_steps == 5


def test_a_config_is_checked_with_todays_messages() -> None:
    with pytest.raises(UserError, match="max_steps, run_timeout, tool_timeout, max_parallel_tools and repeat_limit"):
        _config(max_steps=0)
    with pytest.raises(UserError, match="token_budget must be positive"):
        _config(max_cost=float("nan"))
    with pytest.raises(UserError, match="plan_step_max_steps"):
        _config(plan_step_timeout=0)
    with pytest.raises(UserError, match="max_steps"):  # a variant is checked like the first
        dataclasses.replace(_config(), max_steps=-1)


def test_variants_do_not_touch_their_parent() -> None:
    parent = _config(max_steps=9, delegation=True, agents={"r": AgentSpec(max_steps=2, tools=("note",))},
                     planning=True, reflect=True, observers=(print,))
    before = {f.name: getattr(parent, f.name) for f in dataclasses.fields(parent)}
    step = sub_config(parent, max_steps=3, run_timeout=10.0)
    child = child_config(parent, parent.agents["r"])
    coder = dataclasses.replace(parent, code_mode=True)
    assert (step.max_steps, step.run_timeout, step.planning, step.reflect) == (3, 10.0, False, False)
    assert step.observers == () and step.mcp_servers == {}
    assert child.max_steps == 2 and child.offered.names == ["note"] and "sub-agent" in child.instructions
    assert coder.offered.names == ["python"] and "delegate" in coder.code_tools.names
    assert {f.name: getattr(parent, f.name) for f in dataclasses.fields(parent)} == before
    assert parent.offered.names == ["note", "delegate"] and parent.max_steps == 9
    assert step.redactor is parent.redactor  # the parent's secrets hold in its sub-runs


def test_the_agent_reads_its_config_and_a_setting_replaces_it() -> None:
    agent = Agent(ScriptedModel([{"text": "hi"}]), [note], max_steps=3, delegation=True)
    first = agent.config
    assert agent.max_steps == 3 and agent.tools.names == ["note", "delegate"]
    agent.run_timeout = 30
    assert agent.run_timeout == 30 and agent.config is not first and first.run_timeout == 300.0
    with pytest.raises(UserError):
        agent.max_steps = 0
    again = Agent(config=agent.config, max_steps=4)
    assert again.max_steps == 4 and agent.max_steps == 3


def test_an_unknown_keyword_names_itself() -> None:
    with pytest.raises(TypeError, match="'max_stpes'"):
        Agent(ScriptedModel([{"text": "hi"}]), [note], max_stpes=3)
    with pytest.raises(TypeError, match="'max_stpes'"):
        AgentConfig.from_settings(object(), max_stpes=3)


limit = st.one_of(st.none(), st.integers(1, 10**6))
seconds = st.one_of(st.none(), st.floats(0.001, 1e6, allow_nan=False))


@given(st.integers(1, 10**6), limit, st.one_of(st.none(), st.integers(1, 10**9)), limit)
def test_narrow_only_lowers_steps_and_budgets(steps: int, asked: int | None, budget: int | None,
                                              asked_budget: int | None) -> None:
    config = _config(max_steps=steps, token_budget=budget)
    narrowed = narrow(config, max_steps=asked, token_budget=asked_budget)
    assert narrowed.max_steps == (steps if asked is None else min(steps, asked))
    assert narrowed.token_budget == (budget if asked_budget is None else
                                     asked_budget if budget is None else min(budget, asked_budget))
    assert narrowed.max_steps <= config.max_steps
    assert config.max_steps == steps and config.token_budget == budget  # the parent is untouched


@given(st.floats(0.001, 1e6, allow_nan=False), seconds, st.one_of(st.none(), st.floats(0, 1e3)), seconds)
def test_narrow_only_lowers_times_and_costs(timeout: float, asked: float | None, cost: float | None,
                                            asked_cost: float | None) -> None:
    config = _config(run_timeout=timeout, max_cost=cost)
    narrowed = narrow(config, run_timeout=asked, max_cost=asked_cost)
    assert narrowed.run_timeout <= timeout and narrowed.run_timeout == min(timeout, asked or timeout)
    if cost is not None:
        assert narrowed.max_cost is not None and narrowed.max_cost <= cost
    if asked_cost is not None:
        assert narrowed.max_cost is not None and narrowed.max_cost <= asked_cost


def test_narrow_changes_nothing_but_limits() -> None:
    config = _config()
    assert narrow(config) is config and narrow(config, max_steps=99) is config  # a raise is ignored
    with pytest.raises(TypeError, match="only the limits"):
        narrow(config, planning=True)
    assert "max_steps" in NARROWABLE and "token_budget" in NARROWABLE


def _scalars(config: AgentConfig) -> dict[str, object]:
    """What settings decide, comparable across two builds (not the objects each build makes afresh)."""
    fresh = {"model", "tools", "store", "memory", "observers", "context", "redactor", "skills", "prices",
             "approvals", "settings", "offered", "code_tools", "policy"}
    out = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in fresh}
    out["tools"] = config.offered.names
    out["model"] = config.model.name
    return out


def test_from_settings_is_what_the_cli_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shou.cli.build import Options, build_agent

    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "hi"}]))
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    (home / "shou.toml").write_text('max_steps = 7\ntool_timeout = 12\ntoken_budget = 5000\nmax_reviews = 2\n'
                                    'tools = "read_file,delegate"\n[agents.r]\nmax_steps = 2\n')
    monkeypatch.setenv("SHOU_CONFIG_DIR", str(home))
    for name in [k for k in os.environ if k.startswith("SHOU_") and k != "SHOU_CONFIG_DIR"]:
        monkeypatch.delenv(name)
    agent, settings = build_agent(Options(model=f"scripted:{script}", workspace=ws), open_store=False)
    built = AgentConfig.from_settings(settings, model=agent.model)
    assert _scalars(agent.config) == _scalars(built)
    assert agent.max_steps == 7 and agent.tool_timeout == 12 and agent.token_budget == 5000
    assert agent.tools.names == ["read_file", "delegate"] and set(agent.agents) == {"r"}


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, counting imports inside functions, relative ones made absolute."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            out.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_settings_import_nothing_above_the_foundation() -> None:
    for name in ("settings.py", "setting_tables.py"):
        ours = {m for m in _imports(SRC / name) if m.startswith(".")}
        assert ours <= {".errors", ".setting_tables"}, (name, ours)


def test_no_agent_is_copied_and_patched() -> None:
    for path in [*SRC.glob("agent/*.py"), *SRC.glob("serve/*.py")]:
        text = path.read_text()
        assert "copy.copy(" not in text and "setattr(" not in text, path
