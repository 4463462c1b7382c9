"""Trust of what shou reads as instructions for the model, and where it finds them.

- `AGENTS.md` and `CLAUDE.md` at the workspace root, `.shou/AGENTS.md` and `.shou/MEMORY.md`: read at the
  start of every run into the system prompt (shou.instructions.state);
- a folder's own `AGENTS.md` or `CLAUDE.md`: added when the session first touches a path in that folder
  (shou.instructions.nested, reading paths from tool calls with shou.instructions.touched);
- the workspace's skills (`.agents/skills/*/SKILL.md`, shou.skills) and custom commands
  (`.agents/commands/NAME.md`, shou.instructions.commands).

These files steer the model as the user's own words would, and a cloned repository or sandboxed code can
write them. So they count only as the exact bytes a person trusted with `shou trust` (`trusted.json`, by
absolute path and SHA-256, like the settings files; `instruction_files` is what it records); a file that is
new or changed since is left out (a command: refused) with a warning until it is trusted again.
"""

from __future__ import annotations

from .files import instruction_files
from .state import ROOT_FILES, RUN_FILES, STATE_FILES, trusted_state_text, trusted_state_texts, trusted_texts

__all__ = ["ROOT_FILES", "RUN_FILES", "STATE_FILES", "instruction_files", "trusted_state_text",
           "trusted_state_texts", "trusted_texts"]
