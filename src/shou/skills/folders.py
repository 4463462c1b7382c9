"""Finding and reading skills on disk: the user's skills folder and a workspace's `.agents/skills/` (each
workspace skill only as the exact SKILL.md a person trusted with `shou trust`).

Nothing below a skills folder is reached through a symlink (every step is opened with O_NOFOLLOW relative
to the last), SKILL.md is read only up to `MAX_SKILL_BYTES`, and `read_file` reaches a user skill's files
through one narrow read-only allowance (`open_user_skill_file`).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, ToolError
from ..trust import read_regular
from .dirs import DIR_FLAGS, lmode, open_dir
from .format import (
    MAX_FOLDERS,
    MAX_SKILL_BYTES,
    SKILL_FILE,
    WORKSPACE_PARTS,
    Listed,
    Skill,
    SkillSet,
    Source,
    optional_fields,
    parse,
    validate_description,
    validate_name,
)

if TYPE_CHECKING:
    from ..workspace import Opened

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
        return read_regular(fd, MAX_SKILL_BYTES)
    except ValueError as e:
        raise ValueError(f"{SKILL_FILE} is {e}") from None
    finally:
        os.close(fd)


Accept = Callable[[Path, bytes], bool]


class Untrusted(ValueError):
    """A workspace skill whose SKILL.md a person has not trusted as it is: not even listed, only noted."""


def _load_one(parent_fd: int, folder: str, source: Source, root: Path, parts: tuple[str, ...], shown: str,
              accept: Accept | None = None) -> Skill:
    """The skill in `folder` of the open skills folder; `ValueError` saying why it is skipped. `accept(path,
    bytes)` says whether those exact bytes of SKILL.md were trusted (the bytes checked are the bytes read)."""
    try:
        fd = os.open(folder, DIR_FLAGS, dir_fd=parent_fd)
    except OSError as e:
        mode = lmode(parent_fd, folder)
        if stat.S_ISLNK(mode):
            raise ValueError("it is a symlink; shou does not follow symlinks in skills folders") from None
        raise ValueError(f"the folder cannot be opened: {e.strerror or e}") from None
    try:
        data = _read_skill_file(fd)
    finally:
        os.close(fd)
    if accept is not None and not accept(root.joinpath(*parts, folder, SKILL_FILE), data):
        raise Untrusted(f"the skill {folder!r} in {root.joinpath(*parts)} is ignored: it is not trusted as it is now "
                        f"(new, or changed since `shou trust`). Read it, then run `shou trust` in {root}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{SKILL_FILE} is not UTF-8 text") from None
    front, body = parse(text)
    problem = validate_name(front.get("name"), folder) or validate_description(front.get("description"))
    optional, bad = optional_fields(front)
    if problem or bad:
        raise ValueError(problem or bad)
    return Skill(name=folder, description=" ".join(str(front["description"]).split()), body=body, source=source,
                 folder=shown, root=root, parts=(*parts, folder), **optional)


def _scan(root: Path, parts: tuple[str, ...], source: Source, shown: Callable[[str], str], out: SkillSet,
          found: dict[str, Skill], accept: Accept | None = None) -> None:
    """Load every skill folder of `root/parts...` into `found`, noting each in `out.listed` and every skipped one in
    `out.problems`."""
    where = root.joinpath(*parts)
    try:
        fd = open_dir(root, parts)
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
                skill = _load_one(fd, name, source, root, parts, shown(name), accept)
            except Untrusted as e:  # its name and description are the planter's words: not shown as a row
                out._notice(str(e))
                continue
            except ValueError as e:
                out.listed.append(Listed(name, source, where / name, str(e)))
                out.problems.append(f"skill {name!r} in {where} is skipped: {e}")
                continue
            found[name] = skill
            out.listed.append(Listed(name, source, where / name, "valid", skill.description))
    finally:
        os.close(fd)


def load_skills(workspace: Path | None, user_dir: Path | None, trusted: bool | Accept) -> SkillSet:
    """The skills of the workspace's `.agents/skills/` and of `user_dir` (the user's skills folder,
    `<config dir>/skills`); a workspace skill overrides a user skill of the same name. `trusted`: True reads
    every workspace skill, False none, and a function `(SKILL.md path, bytes) -> bool` those whose exact
    bytes a person trusted (`shou trust`): a skill planted or changed since is skipped with a warning."""
    out = SkillSet()
    user: dict[str, Skill] = {}
    if user_dir is not None:
        absolute = Path(os.path.abspath(user_dir))
        _scan(absolute, (), "user", lambda name: str(absolute / name), out, user)
    mine: dict[str, Skill] = {}
    if workspace is not None:
        ws = Path(os.path.abspath(workspace))
        if trusted:
            _scan(ws, WORKSPACE_PARTS, "workspace", lambda name: "/".join((*WORKSPACE_PARTS, name)), out, mine,
                  None if trusted is True else trusted)
        elif os.path.lexists(ws.joinpath(*WORKSPACE_PARTS)):  # looked at, never read: only its presence is told
            out._notice(
                f"the skills in {ws.joinpath(*WORKSPACE_PARTS)} are ignored: this workspace is not trusted. A cloned "
                f"repository must not hand the model instructions; if you trust it, run `shou trust` in {ws}")
    for i, entry in enumerate(out.listed):
        if entry.source == "user" and entry.valid and entry.name in mine:
            out.listed[i] = Listed(entry.name, "user", entry.path, "overridden by the workspace skill of the same name",
                                   entry.description)
    out.skills = {**user, **mine}
    return out


def workspace_skill_files(workspace: Path) -> dict[Path, bytes]:
    """The SKILL.md of every folder of the workspace's `.agents/skills/`, as `shou trust` records them
    (read as skills are: no symlink followed, regular files only; unreadable ones left out)."""
    ws = Path(workspace).resolve()
    try:
        fd = open_dir(ws, WORKSPACE_PARTS)
    except OSError:
        return {}
    out: dict[Path, bytes] = {}
    try:
        with os.scandir(fd) as entries:
            names = sorted(e.name for e in entries if not e.name.startswith(".") and e.is_dir(follow_symlinks=False))
        for name in names[:MAX_FOLDERS]:
            try:
                sub = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue
            try:
                out[ws.joinpath(*WORKSPACE_PARTS, name, SKILL_FILE)] = _read_skill_file(sub)
            except ValueError:
                continue
            finally:
                os.close(sub)
    finally:
        os.close(fd)
    return out


def user_skills_dir(settings: Any) -> Path:
    """The user's skills folder: `skills/` beside the user's shou.toml."""
    from ..config import user_config_dir

    return user_config_dir(settings.env) / "skills"


def workspace_trusted(workspace: Path, config_dir: Path) -> bool:
    """Whether a person trusted the exact bytes of the workspace's `shou.toml` (`shou trust`)."""
    from ..trust import TrustStore, read_config_file

    path = Path(workspace) / "shou.toml"
    try:
        data = read_config_file(path)
        return data is not None and TrustStore(config_dir).is_trusted(path, data)
    except ConfigError:  # a symlink or a FIFO in its place, a damaged trusted.json: not trusted
        return False


def discover(settings: Any) -> SkillSet:
    """Every skill the settings' workspace and user config dir offer (what `shou skills` lists): workspace
    skills whose SKILL.md a person trusted as it is now (`shou trust`)."""
    from ..config import user_config_dir
    from ..trust import TrustStore

    workspace = Path(settings.workspace).resolve()  # trust is recorded under the resolved path
    store = TrustStore(user_config_dir(settings.env))
    try:
        entries = store.entries()
    except ConfigError:  # a damaged trusted.json: nothing is trusted
        entries = {}
    from ..trust import digest

    def accept(path: Path, data: bytes) -> bool:
        return entries.get(str(path)) == digest(data)

    return load_skills(workspace, user_skills_dir(settings), accept)


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
    from ..workspace import NotFound, Opened, open_beneath, relative_parts

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
        fd = open_dir(root, ())
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
