"""Agent Skills: folders with a `SKILL.md` (the open Agent Skills format), loaded on demand.

A skill is a folder `<name>/SKILL.md` with YAML front matter (`name`, `description`, optional `license`,
`compatibility`, `metadata`, `allowed-tools`) and a Markdown body, plus any other files it refers to. Skills
come from two places:

- the workspace's `.agents/skills/`, each skill read only as the exact SKILL.md a person trusted with
  `shou trust`: a cloned repository, or code the agent ran, must not be able to hand the model
  instructions on its own;
- the user's `skills/` folder beside the user's `shou.toml` (`<config dir>/skills/`).

A workspace skill overrides a user skill of the same name. The system prompt carries only the catalog (name
and description); `use_skill(name)` returns the body and lists the skill's other files, which `read_file`
can read (a user skill's files through a narrow read-only allowance: `open_user_skill_file`). Nothing below
a skills folder is reached through a symlink, and SKILL.md is read only up to `MAX_SKILL_BYTES`.
"""

from __future__ import annotations

from .folders import (
    discover,
    load_skills,
    open_user_skill_file,
    skills_for,
    user_skills_dir,
    workspace_skill_files,
    workspace_trusted,
)
from .format import MAX_SKILL_BYTES, Listed, Skill, SkillSet, parse, validate_description, validate_name

__all__ = [
    "MAX_SKILL_BYTES", "Listed", "Skill", "SkillSet", "discover", "load_skills", "open_user_skill_file", "parse",
    "skills_for", "user_skills_dir", "validate_description", "validate_name", "workspace_skill_files",
    "workspace_trusted",
]
