"""The Agent Skills format: a skill (front matter and body), the set a run uses, and validation.

Reading skills from disk safely is `shou.skills.folders`; this module never touches the filesystem but to
list a loaded skill's files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ToolError
from .dirs import MAX_LISTED, open_dir, walk

if TYPE_CHECKING:
    from ..tools.base import Tool

Source = Literal["workspace", "user"]

MAX_SKILL_BYTES = 256 * 1024  # the Agent Skills format asks for short bodies (< 5000 tokens); this is generous
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
MAX_FOLDERS = 500  # skill folders looked at per source: a runaway folder must not slow every start
WORKSPACE_PARTS = (".agents", "skills")
SKILL_FILE = "SKILL.md"
TOOL_NAME = "use_skill"

_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_SCALARS = (str, int, float, bool)


@dataclass(frozen=True, slots=True)
class Skill:
    """A valid skill: its front matter, its body, and where its folder is.

    `folder` is how the model names the folder to `read_file`: workspace-relative for a workspace skill,
    absolute for a user skill. The folder is `root/parts...`, where `root` is the workspace or the user's
    skills folder, and nothing in `parts` is reached through a symlink.
    """

    name: str
    description: str
    body: str
    source: Source
    folder: str
    root: Path
    parts: tuple[str, ...]
    license: str | None = None
    compatibility: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    allowed_tools: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        """The skill's folder."""
        return self.root.joinpath(*self.parts)

    def files(self) -> list[str]:
        """The skill's other files (not SKILL.md itself) as `read_file` paths; symlinks and hidden files are
        left out, and past `MAX_LISTED` the list ends with a line saying there are more."""
        try:
            fd = open_dir(self.root, self.parts)
        except OSError:  # removed or swapped for a symlink since it was loaded
            return []
        found: list[str] = []
        try:
            walk(fd, "", 0, found)
        finally:
            os.close(fd)
        files = sorted(f"{self.folder}/{rel}" for rel in found if rel != SKILL_FILE)
        return [*files[:MAX_LISTED], "... (more files, not listed)"] if len(files) > MAX_LISTED else files

    def content(self) -> str:
        """What `use_skill` hands the model: the body, the skill's folder and its other files."""
        files = self.files()
        body = self.body or "(This skill has no instructions beyond its description.)"
        lines = [body, "", "---", f"Skill folder: {self.folder} (paths in these instructions are relative to it)."]
        if self.source == "user":
            lines.append("It is outside the workspace: read_file can read its files, shell commands cannot reach "
                         "them.")
        if files:
            lines.append("Other files of the skill (read them with read_file when the instructions call for them):")
            lines += [f"- {f}" for f in files]
        else:
            lines.append("The skill has no other files.")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Listed:
    """One skill folder looked at, for `shou skills`: `status` is "valid", or why it is skipped."""

    name: str
    source: Source
    path: Path
    status: str
    description: str = ""

    @property
    def valid(self) -> bool:
        """Whether the skill is in use."""
        return self.status == "valid"


@dataclass(slots=True)
class SkillSet:
    """The skills in use (`skills`, name -> Skill), every skill folder looked at (`listed`) and the warnings
    for the person (`problems`: each skipped skill, and the `notices` about whole folders, such as the
    ignored skills of an untrusted workspace)."""

    skills: dict[str, Skill] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    listed: list[Listed] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    def _notice(self, message: str) -> None:
        self.notices.append(message)
        self.problems.append(message)

    def catalog(self) -> str:
        """The system prompt's skills section: name and description only (empty when there are none)."""
        if not self.skills:
            return ""
        lines = ["## Skills", f"Before a task one of these fits, call {TOOL_NAME} with its name to load its full "
                 "instructions, then follow them."]
        lines += [f"- {s.name}: {s.description}" for s in sorted(self.skills.values(), key=lambda s: s.name)]
        return "\n".join(lines)

    def tool(self) -> Tool:
        """The `use_skill` tool over these skills."""
        from ..tools.base import Tool, ToolResult

        skills = self.skills

        def use_skill(name: str) -> ToolResult:
            skill = skills.get(name.strip())
            if skill is None:
                raise ToolError(f"there is no skill named {name!r}; the skills are: {', '.join(sorted(skills))}")
            # The session keeps `details["skill"]` so the body stays in the system prompt past compaction.
            return ToolResult(skill.content(), details={"skill": {"name": skill.name, "body": skill.body}})

        parameters = {
            "type": "object",
            "properties": {"name": {"type": "string", "description": "The skill's name, as the Skills list gives it."}},
            "required": ["name"],
            "additionalProperties": False,
        }
        return Tool(TOOL_NAME, "Load a skill's full instructions (the system prompt lists the skills) and the list "
                    "of its other files.", parameters, use_skill, idempotent=True)


# ---------------------------------------------------------------- validation


def validate_name(name: object, folder: str | None = None) -> str | None:
    """Why `name` is not a valid skill name (for the folder `folder`), or None when it is."""
    if not isinstance(name, str) or not name:
        return "front matter has no name"
    if len(name) > MAX_NAME:
        return f"name is {len(name)} characters; at most {MAX_NAME}"
    if not _NAME.fullmatch(name):
        return f"name {name!r} may hold only a-z, 0-9 and single hyphens between them"
    if folder is not None and name != folder:
        return f"name {name!r} does not match its folder {folder!r}"
    return None


def validate_description(description: object) -> str | None:
    """Why `description` is not a valid skill description, or None when it is."""
    if not isinstance(description, str) or not description.strip():
        return "front matter has no description"
    if len(description) > MAX_DESCRIPTION:
        return f"description is {len(description)} characters; at most {MAX_DESCRIPTION}"
    return None


def parse(text: str) -> tuple[dict[str, Any], str]:
    """The front matter (a mapping) and the body of a SKILL.md; `ValueError` saying what is wrong."""
    import yaml

    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        raise ValueError("SKILL.md does not start with YAML front matter (a '---' line)")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)
    if end is None:
        raise ValueError("SKILL.md's front matter has no closing '---' line")
    try:
        front = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as e:
        why = " ".join(str(e).split())
        raise ValueError(f"front matter is not valid YAML: {why[:200]}") from None
    if not isinstance(front, dict):
        raise ValueError("front matter is not a mapping of fields")
    return front, "\n".join(lines[end + 1:]).strip()


def optional_fields(front: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The optional fields, checked (values of another type are not stringified: a YAML alias could make one
    huge)."""
    out: dict[str, Any] = {}
    for key in ("license", "compatibility"):
        value = front.get(key)
        if value is not None and not isinstance(value, _SCALARS):
            return {}, f"{key} must be text"
        out[key] = None if value is None else str(value)
    if out["compatibility"] is not None and len(out["compatibility"]) > MAX_COMPATIBILITY:
        return {}, f"compatibility is {len(out['compatibility'])} characters; at most {MAX_COMPATIBILITY}"
    metadata = front.get("metadata")
    if metadata is not None and not (isinstance(metadata, dict)
                                     and all(isinstance(v, _SCALARS) for v in metadata.values())):
        return {}, "metadata must map names to text"
    out["metadata"] = {str(k): str(v) for k, v in (metadata or {}).items()}
    tools = front.get("allowed-tools")
    if isinstance(tools, str):
        out["allowed_tools"] = tuple(tools.split())
    elif isinstance(tools, list) and all(isinstance(t, str) for t in tools):
        out["allowed_tools"] = tuple(tools)
    elif tools is None:
        out["allowed_tools"] = ()
    else:
        return {}, "allowed-tools must be a space-separated list of tool names"
    return out, None


