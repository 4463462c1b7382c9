"""An agent from settings, as every face builds one: `shou run` and `chat`, `shou eval`, `shou batch`.

The faces differ only in what they add (a terminal's approver, their observers) and in how they tell a
person about what was left out: `warn` is given each such message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import UserError
from .agent import Agent
from .config import AgentConfig

__all__ = ["agent_from_settings"]

LOCAL_HINT = ("Using SmolLM2-135M, a small offline model: it can call a tool for a simple task but cannot reason "
              "much. For a real model set a key (e.g. DEEPSEEK_API_KEY) or --model; see `shou config`.")


def agent_from_settings(settings: Any, *, functions: Sequence[Path] = (), extra_tools: Iterable[Any] = (),
                        model: Any = None,
                        store: Any = "workspace", approvals: Any = "deny",
                        observers: Iterable[Callable[[Any], Any]] | Callable[[Any], Iterable[Any]] = (),
                        warn: Callable[[str], None] = lambda _: None,
                        **fields: Any) -> Agent:
    """The agent `settings` describe: their model (or `model`), the built-in tools, those of `functions`
    files and `extra_tools`, the workspace's store (`store="workspace"`; None for none, or a store to use),
    long-term memory when the workspace has some, skills, and `fields` (AgentConfig fields: planning, reflect,
    code_mode, limits).
    `observers` may be a function of the store (an alert monitor seeded from its log). `warn` is told what was
    left out (ignored settings, a damaged memory file) as it is found."""
    from ..context.builder import ContextPolicy
    from ..context.relevance import default_embed
    from ..context.tokens import prefetch_encoder
    from ..models import build_model
    from ..store.sqlite import SQLiteStore
    from ..tools.builtin import builtin_tools
    from ..tools.loader import load_tools_from_file
    from ..tools.registry import ToolSet

    for ignored in settings.ignored:
        warn(ignored.message())
    if settings.sandbox == "local":
        from ..sandbox.local import warn_once

        warn_once()  # at start, before any tool call
    if not settings.workspace.is_dir():
        raise UserError(f"workspace {settings.workspace} is not a folder")
    tools = ToolSet(builtin_tools())
    for file in functions:
        for t in load_tools_from_file(file):
            tools.add(t)
    for t in extra_tools:
        tools.add(t)
    if model is None:
        model = build_model(settings)
    prefetch_encoder(model.name)  # builds in a thread while the tools, stores and agent are set up
    if model.name.startswith("local:") and not settings.model:
        warn(LOCAL_HINT)
    if store == "workspace":
        store = SQLiteStore.for_workspace(settings.workspace, settings.trace_retention_days)
        if store.notice:
            warn(store.notice)
    from ..skills import skills_for

    skills = skills_for(settings, warn=warn) if settings.tools is None or "use_skill" in settings.tools else None
    watching = tuple(observers(store) if callable(observers) else observers)
    config = AgentConfig.from_settings(
        settings, model=model, tools=tools, store=store, memory=_memory(settings, warn), skills=skills,
        approvals=approvals, observers=watching, context=ContextPolicy(embed=default_embed()), **fields,
    )
    return Agent(config=config)


def _memory(settings: Any, warn: Callable[[str], None]) -> Any:
    """The workspace's long-term memory, if it has a memory file (one is made by save_memory, when something
    is worth keeping: a workspace without one has nothing to recall)."""
    try:
        if (settings.workspace / ".shou" / "memory.db").exists():
            from ..memory import MemoryStore

            return MemoryStore.for_workspace(settings.workspace, env=settings.env)
    except Exception as e:  # a damaged memory file must not stop the run: it goes without long-term memory
        warn(f"long-term memory is off for this run: {e}")
    return None
