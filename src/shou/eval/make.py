"""How a sample gets its agent: from settings (what `shou eval` and `shou batch` do), or from an agent made
in Python. Either way the sample's workspace is the agent's, its model is the sample's (`oracle`: the case's
scripted solution), and the case's modes apply (and, for agents made from settings, the skills its fixture
ships); its limits and the evaluation's budget are applied by the sample runner, for every maker alike.
"""

from __future__ import annotations

import os
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
        agent = agent_from_settings(settings, extra_tools=extra, model=model, store=store,
                                    approvals=settings.approvals if settings.approvals in ("yes", "deny") else "deny",
                                    observers=observers, **_modes(sample))
        _offer_shipped_skills(agent, sample, workspace, settings)
        return agent

    return make


SKILLS_PREFIX = ".agents/skills/"


def _shipped_skills(files: Path | Mapping[str, str | bytes] | None) -> dict[str, bytes]:
    """The SKILL.md of each `.agents/skills/NAME/` folder of a case's fixture, by workspace-relative path."""
    if isinstance(files, Path):
        root = files / ".agents" / "skills"
        if not root.is_dir() or root.is_symlink():
            return {}
        return {f"{SKILLS_PREFIX}{d.name}/SKILL.md": (d / "SKILL.md").read_bytes() for d in sorted(root.iterdir())
                if d.is_dir() and not d.is_symlink() and (d / "SKILL.md").is_file()
                and not (d / "SKILL.md").is_symlink()}
    return {rel: v.encode() if isinstance(v, str) else v for rel, v in (files or {}).items()
            if rel.startswith(SKILLS_PREFIX) and rel.endswith("/SKILL.md") and rel.count("/") == 3}


def _offer_shipped_skills(agent: Agent, sample: Sample, workspace: Path, settings: Any) -> None:
    """Offer the skills the case's fixture ships in `.agents/skills/`. A sample's workspace is never one a
    person trusted (`shou trust`), so its skills would be ignored; but these come from the suite's author, who
    is trusted like the case's settings and check code. Only the exact SKILL.md bytes of the fixture are
    accepted, as `shou trust` accepts only the bytes a person read: a skill a run plants or changes in the
    workspace is still not read."""
    shipped = _shipped_skills(sample.case.files)
    if not shipped or (settings.tools is not None and "use_skill" not in settings.tools):
        return
    from ..skills import load_skills, user_skills_dir

    root = Path(os.path.abspath(workspace))

    def accept(path: Path, data: bytes) -> bool:
        try:
            rel = path.relative_to(root).as_posix()
        except ValueError:
            return False
        return shipped.get(rel) == data

    found = load_skills(root, user_skills_dir(settings), accept)
    if found.skills:
        agent.config = replace(agent.config, skills=found)


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
