"""How a sample gets its agent: from settings (what `shou eval` and `shou batch` do), or from an agent made
in Python. Either way the sample's workspace is the agent's, its model is the sample's (`oracle`: the case's
scripted solution), and the case's modes apply; its limits and the evaluation's budget are applied by the
sample runner, for every maker alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UserError

if TYPE_CHECKING:
    from ..agent.agent import Agent
    from ..models.base import Model
    from .sample import AgentMaker, Sample

__all__ = ["ORACLE", "agent_maker", "settings_maker", "solution_model"]

ORACLE = "oracle"


def solution_model(sample: Sample) -> Model:
    """The oracle: a scripted model playing the case's own solution (each sample its own playback)."""
    from ..models.scripted import ScriptedModel

    if sample.case.solution is None:
        raise UserError(f"case {sample.case.id} has no solution for the oracle model")
    return ScriptedModel(list(sample.case.solution), name=ORACLE)


def _modes(sample: Sample) -> dict[str, Any]:
    case = sample.case
    return {"planning": case.plan, "reflect": case.reflect, "code_mode": case.code}


def settings_maker(flags: Mapping[str, Any], *, functions: Sequence[Path] = (), store: Any = "workspace",
                   observers: Any = ()) -> AgentMaker:
    """Agents from the settings the command line gives (`flags`, as `load_settings` takes them) with each
    case's `settings` over them (the suite's author is trusted like the command line), on the sample's
    workspace; `store` is "workspace" (each workspace's own `.shou/shou.db`) or a store every sample shares."""
    from ..agent.build import agent_from_settings
    from ..config import load_settings
    from ..tools.loader import load_tools_from_file

    # imported once for the whole run (a tool is a description and a function: agents may share it)
    extra = [t for file in functions for t in load_tools_from_file(file)]

    def make(sample: Sample, workspace: Path) -> Agent:
        spec = sample.model or sample.case.model
        overrides = {**flags, **sample.case.settings, "workspace": workspace}
        model = None
        if spec == ORACLE:
            model = solution_model(sample)
        elif spec:
            overrides["model"] = spec
        settings = load_settings(overrides)
        return agent_from_settings(settings, extra_tools=extra, model=model, store=store,
                                   approvals=settings.approvals if settings.approvals in ("yes", "deny") else "deny",
                                   observers=observers, **_modes(sample))

    return make


def agent_maker(agent: Agent) -> AgentMaker:
    """Agents that are `agent` on the sample's workspace (and its own store there), with the sample's model
    when it names one. Cases with `settings` need settings-made agents (`settings_maker`)."""
    from ..agent.agent import Agent
    from ..models import get_model
    from ..store.sqlite import SQLiteStore

    def make(sample: Sample, workspace: Path) -> Agent:
        if sample.case.settings:
            raise UserError(f"case {sample.case.id} has settings, which apply to agents made from settings: run it "
                            "with `shou eval`, or give run_suite no agent")
        spec = sample.model or sample.case.model
        fields: dict[str, Any] = {"workspace": workspace, "store": SQLiteStore.for_workspace(workspace),
                                  **{k: True for k, on in _modes(sample).items() if on}}  # the agent's own stay
        if spec == ORACLE:
            fields["model"] = solution_model(sample)
        elif spec:
            fields["model"] = get_model(spec, agent.settings)
        return Agent(config=replace(agent.config, **fields))

    return make
