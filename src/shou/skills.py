"""Agent Skills: folders with a `SKILL.md` (the open Agent Skills format), loaded on demand.

A skill is a folder `<name>/SKILL.md` with YAML front matter (`name`, `description`, optional `license`,
`compatibility`, `metadata`, `allowed-tools`) and a Markdown body, plus any other files it refers to. Skills
come from two places:

- the workspace's `.agents/skills/`, read only when the workspace is trusted (its `shou.toml` approved with
  `shou trust`): a cloned repository must not be able to hand the model instructions on its own;
- the user's `skills/` folder beside the user's `shou.toml` (`<config dir>/skills/`).

A workspace skill overrides a user skill of the same name. The system prompt carries only the catalog (name
and description); `use_skill(name)` returns the body and lists the skill's other files, which `read_file`
can read (a user skill's files through a narrow read-only allowance: `open_user_skill_file`). Nothing below
a skills folder is reached through a symlink, and SKILL.md is read only up to `MAX_SKILL_BYTES`.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .errors import ConfigError, ToolError

if TYPE_CHECKING:
    from .tools.base import Tool
    from .workspace import Opened

__all__ = [
    "MAX_SKILL_BYTES", "Listed", "Skill", "SkillSet", "discover", "load_skills", "open_user_skill_file", "parse",
    "skills_for", "user_skills_dir", "validate_description", "validate_name", "workspace_trusted",
]

Source = Literal["workspace", "user"]

MAX_SKILL_BYTES = 256 * 1024  # the Agent Skills format asks for short bodies (< 5000 tokens); this is generous
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
MAX_FOLDERS = 500  # skill folders looked at per source: a runaway folder must not slow every start
MAX_LISTED = 100  # other files use_skill lists
MAX_DEPTH = 6
WORKSPACE_PARTS = (".agents", "skills")
SKILL_FILE = "SKILL.md"
TOOL_NAME = "use_skill"

_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
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
            fd = _open_dir(self.root, self.parts)
        except OSError:  # removed or swapped for a symlink since it was loaded
            return []
        found: list[str] = []
        try:
            _walk(fd, "", 0, found)
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
        from .tools.base import Tool, ToolResult

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


def _optional(front: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
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


# ---------------------------------------------------------------- loading


def _open_dir(root: Path, parts: tuple[str, ...]) -> int:
    """`root/parts...` as an open folder, following no symlink below `root` (`OSError` otherwise)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts:
            nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_skill_file(dir_fd: int) -> bytes:
    """SKILL.md in the open folder: a regular file, not a symlink, at most MAX_SKILL_BYTES (`ValueError`)."""
    try:
        fd = os.open(SKILL_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        raise ValueError(f"the folder has no {SKILL_FILE}") from None
    except OSError as e:
        what = "a symlink" if e.errno == errno.ELOOP else e.strerror or str(e)
        raise ValueError(f"{SKILL_FILE} is {what}; shou reads skills only from regular files") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{SKILL_FILE} is not a regular file")
        if st.st_size > MAX_SKILL_BYTES:
            raise ValueError(f"{SKILL_FILE} is {st.st_size} bytes; at most {MAX_SKILL_BYTES}")
        data = b""
        while len(data) <= MAX_SKILL_BYTES and (chunk := os.read(fd, 65536)):  # it may grow while we read
            data += chunk
        if len(data) > MAX_SKILL_BYTES:
            raise ValueError(f"{SKILL_FILE} is over {MAX_SKILL_BYTES} bytes")
        return data
    finally:
        os.close(fd)


def _load_one(parent_fd: int, folder: str, source: Source, root: Path, parts: tuple[str, ...], shown: str) -> Skill:
    """The skill in `folder` of the open skills folder; `ValueError` saying why it is skipped."""
    try:
        fd = os.open(folder, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as e:
        mode = _lmode(parent_fd, folder)
        if stat.S_ISLNK(mode):
            raise ValueError("it is a symlink; shou does not follow symlinks in skills folders") from None
        raise ValueError(f"the folder cannot be opened: {e.strerror or e}") from None
    try:
        data = _read_skill_file(fd)
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{SKILL_FILE} is not UTF-8 text") from None
    front, body = parse(text)
    problem = validate_name(front.get("name"), folder) or validate_description(front.get("description"))
    optional, bad = _optional(front)
    if problem or bad:
        raise ValueError(problem or bad)
    return Skill(name=folder, description=" ".join(str(front["description"]).split()), body=body, source=source,
                 folder=shown, root=root, parts=(*parts, folder), **optional)


def _lmode(dir_fd: int, name: str) -> int:
    try:
        return os.lstat(name, dir_fd=dir_fd).st_mode
    except OSError:
        return 0


def _walk(fd: int, prefix: str, depth: int, out: list[str]) -> None:
    """Add to `out` the relative paths of the regular files below the open folder `fd`: no symlink followed,
    hidden names skipped, at most MAX_DEPTH folders deep, stopping past MAX_LISTED + 1 (SKILL.md and one
    more, enough to say there are more)."""
    with os.scandir(fd) as entries:
        names = sorted((e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)) for e in entries)
    for name, is_dir, is_file in names:
        if len(out) > MAX_LISTED + 1:
            return
        if name.startswith("."):
            continue
        if is_file:
            out.append(prefix + name)
        elif is_dir and depth < MAX_DEPTH:
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:  # swapped for a symlink meanwhile, or unreadable: leave it out
                continue
            try:
                _walk(sub, f"{prefix}{name}/", depth + 1, out)
            finally:
                os.close(sub)


def _scan(root: Path, parts: tuple[str, ...], source: Source, shown: Callable[[str], str], out: SkillSet,
          found: dict[str, Skill]) -> None:
    """Load every skill folder of `root/parts...` into `found`, noting each in `out.listed` and every skipped one in
    `out.problems`."""
    where = root.joinpath(*parts)
    try:
        fd = _open_dir(root, parts)
    except FileNotFoundError:
        return
    except OSError as e:
        why = "is a symlink or not a folder" if e.errno in (errno.ELOOP, errno.ENOTDIR) else \
            f"cannot be opened ({e.strerror or e})"
        out._notice(f"{source} skills in {where} are ignored: it {why}; shou does not follow symlinks to skills")
        return
    try:
        with os.scandir(fd) as entries:
            names = sorted(e.name for e in entries if not e.name.startswith(".")
                           and (e.is_dir(follow_symlinks=False) or e.is_symlink()))
        if len(names) > MAX_FOLDERS:
            out._notice(f"{where} holds {len(names)} folders; only the first {MAX_FOLDERS} are read")
            names = names[:MAX_FOLDERS]
        for name in names:
            try:
                skill = _load_one(fd, name, source, root, parts, shown(name))
            except ValueError as e:
                out.listed.append(Listed(name, source, where / name, str(e)))
                out.problems.append(f"skill {name!r} in {where} is skipped: {e}")
                continue
            found[name] = skill
            out.listed.append(Listed(name, source, where / name, "valid", skill.description))
    finally:
        os.close(fd)


def load_skills(workspace: Path | None, user_dir: Path | None, trusted: bool) -> SkillSet:
    """The skills of the workspace's `.agents/skills/` (only when `trusted`) and of `user_dir` (the user's
    skills folder, `<config dir>/skills`); a workspace skill overrides a user skill of the same name."""
    out = SkillSet()
    user: dict[str, Skill] = {}
    if user_dir is not None:
        absolute = Path(os.path.abspath(user_dir))
        _scan(absolute, (), "user", lambda name: str(absolute / name), out, user)
    mine: dict[str, Skill] = {}
    if workspace is not None:
        ws = Path(os.path.abspath(workspace))
        if trusted:
            _scan(ws, WORKSPACE_PARTS, "workspace", lambda name: "/".join((*WORKSPACE_PARTS, name)), out, mine)
        elif os.path.lexists(ws.joinpath(*WORKSPACE_PARTS)):  # looked at, never read: only its presence is told
            out._notice(
                f"the skills in {ws.joinpath(*WORKSPACE_PARTS)} are ignored: this workspace is not trusted. A cloned "
                "repository must not hand the model instructions; if you trust it, create its shou.toml (it may be "
                f"empty) and run `shou trust` in {ws}")
    for i, entry in enumerate(out.listed):
        if entry.source == "user" and entry.valid and entry.name in mine:
            out.listed[i] = Listed(entry.name, "user", entry.path, "overridden by the workspace skill of the same name",
                                   entry.description)
    out.skills = {**user, **mine}
    return out


def user_skills_dir(settings: Any) -> Path:
    """The user's skills folder: `skills/` beside the user's shou.toml."""
    from .config import user_config_dir

    return user_config_dir(settings.env) / "skills"


def workspace_trusted(workspace: Path, config_dir: Path) -> bool:
    """Whether a person trusted the exact bytes of the workspace's `shou.toml` (`shou trust`)."""
    from .trust import TrustStore, read_config_file

    path = Path(workspace) / "shou.toml"
    try:
        data = read_config_file(path)
        return data is not None and TrustStore(config_dir).is_trusted(path, data)
    except ConfigError:  # a symlink or a FIFO in its place, a damaged trusted.json: not trusted
        return False


def discover(settings: Any) -> SkillSet:
    """Every skill the settings' workspace and user config dir offer (what `shou skills` lists)."""
    from .config import user_config_dir

    workspace = Path(settings.workspace)
    trusted = workspace_trusted(workspace, user_config_dir(settings.env))
    return load_skills(workspace, user_skills_dir(settings), trusted)


def skills_for(settings: Any, warn: Callable[[str], Any]) -> SkillSet | None:
    """The skills a run gets, or None when there are none; `warn(message)` is called once per problem."""
    found = discover(settings)
    for problem in found.problems:
        warn(problem)
    return found if found.skills else None


# ---------------------------------------------------------------- read_file's allowance


def open_user_skill_file(settings: Any, path: str) -> Opened | None:
    """For `read_file`: the file `path` of a skill in the user's skills folder, opened read-only, or None
    when `path` does not point into that folder.

    Only absolute paths under `<config dir>/skills/NAME/` where NAME is a valid skill are allowed; the walk
    from the skills folder follows no symlink. `ToolError` when the path is in the folder but not a file of
    a skill.
    """
    from .workspace import NotFound, Opened, open_beneath, relative_parts

    if settings is None or not os.path.isabs(path):
        return None
    root = user_skills_dir(settings)
    try:
        parts = relative_parts(root, path)
    except ToolError:  # not below the skills folder (or not a usable path): not this allowance's business
        return None
    if len(parts) < 2:
        raise ToolError(f"{path!r} is a skills folder, not a file; use_skill lists a skill's files")
    name = parts[0]
    try:
        fd = _open_dir(root, ())
        try:
            _load_one(fd, name, "user", root, (), str(root / name))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        raise ToolError(f"{path!r} is not a file of a skill in the user's skills folder; read_file reads only "
                        "the workspace and the files of those skills") from None
    try:
        return Opened(open_beneath(root, parts, os.O_RDONLY), str(root.joinpath(*parts)))
    except NotFound:
        raise ToolError(f"{path!r} does not exist; call use_skill({name!r}) to list the skill's files") from None
