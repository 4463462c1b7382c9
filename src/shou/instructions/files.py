"""Every file of a workspace that shou reads as instructions for the model, with its bytes now: what `shou
trust` shows and records (by path and SHA-256) so that runs may use it."""

from __future__ import annotations

from pathlib import Path

from ..workspace import STATE_DIR
from .commands import workspace_command_files
from .nested import nested_files
from .state import ROOT_FILES, STATE_FILES, read_beneath

__all__ = ["instruction_files"]


def instruction_files(workspace: Path, notes: list[str] | None = None) -> dict[Path, bytes]:
    """The root `AGENTS.md` and `CLAUDE.md`, `.shou/AGENTS.md` and `MEMORY.md`, the nested `AGENTS.md` and
    `CLAUDE.md` a run may come across, the skills' `SKILL.md` and the custom commands, each as read now.
    `notes` gets a line for anything not looked at (a walk cut short)."""
    from ..skills import workspace_skill_files

    root = Path(workspace).resolve()  # the path `shou trust` records (it resolves too)
    wanted = (*((name,) for name in ROOT_FILES), *((STATE_DIR, name) for name in STATE_FILES))
    out = {root.joinpath(*parts): data for parts, data in read_beneath(root, wanted).items()}
    out.update(nested_files(root, notes))
    out.update(workspace_skill_files(root))
    out.update(workspace_command_files(root))
    return out
