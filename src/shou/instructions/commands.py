"""Custom commands: `NAME.md` prompt templates run as `/NAME args` (`shou chat`, `shou run /NAME args`).

A command is a Markdown file in the workspace's `.agents/commands/` or in `commands/` beside the user's
shou.toml. Its text is the task, with `$ARGUMENTS` replaced by everything after the name and `$1`, `$2`, ...
by the arguments one by one (split as a shell splits words); with neither in it, the arguments follow the
text on a line `ARGUMENTS: ...`. Optional YAML front matter may give a `description` (listed by `/help` and
`shou commands`), an `argument-hint` and `allowed-tools`, which narrows the tools of the run (it can never
add one). Other fields are ignored: a command cannot choose the model or widen anything.

A workspace command is an instruction from the workspace (a cloned repository ships `.agents/`, sandboxed
code can write it), so it runs only as the exact bytes a person trusted with `shou trust`; one that is new or
changed is refused, saying so. The user's own commands are trusted. A workspace command overrides the
user's of the same name. A name is a-z, 0-9, `-` and `_`; one that is a built-in chat command is an error.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import UserError
from ..trust import digest, read_closing

__all__ = ["BUILTIN", "Command", "CommandSet", "Listed", "discover", "expand", "invocation", "load_commands",
           "user_commands_dir", "workspace_command_files"]

Source = Literal["workspace", "user"]

WORKSPACE_PARTS = (".agents", "commands")
BUILTIN = frozenset({"help", "tools", "clear", "compact", "quit", "exit"})  # `shou chat`'s own
MAX_COMMAND_BYTES = 64 * 1024
MAX_COMMANDS = 500  # files looked at per folder
MAX_NAME = 64
MAX_DESCRIPTION = 1024
_NAME = re.compile(r"[a-z0-9]+(?:[-_][a-z0-9]+)*")
_INVOCATION = re.compile(r"/([^\s/]+)(?:\s+(.*))?", re.S)
_PLACEHOLDER = re.compile(r"\$ARGUMENTS|\$([1-9][0-9]?)")

Accept = Callable[[Path, bytes], bool]


@dataclass(frozen=True, slots=True)
class Command:
    """A valid command: its template (the body) and what its front matter says."""

    name: str
    source: Source
    path: Path
    template: str
    description: str = ""
    argument_hint: str = ""
    allowed_tools: tuple[str, ...] | None = None  # None: the run's tools as they are

    def expand(self, arguments: str, positional: Sequence[str] | None = None) -> str:
        """The task this command makes of `arguments` (`UserError` when that is empty)."""
        task = expand(self.template, arguments, positional)
        if not task.strip():
            raise UserError(f"the command /{self.name} ({self.path}) makes an empty task")
        return task


@dataclass(frozen=True, slots=True)
class Listed:
    """One command file looked at, for `shou commands` and `/help`: `status` is "valid", or why it is not run."""

    name: str
    source: Source
    path: Path
    status: str
    description: str = ""

    @property
    def valid(self) -> bool:
        """Whether `/NAME` runs it."""
        return self.status == "valid"


@dataclass(slots=True)
class CommandSet:
    """The commands in use (`commands`), every file looked at (`listed`) and why the others are refused."""

    commands: dict[str, Command] = field(default_factory=dict)
    listed: list[Listed] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # name -> why /NAME is refused

    def get(self, name: str) -> Command:
        """The command `/name` runs; `UserError` saying why there is none."""
        if name in self.commands:
            return self.commands[name]
        if name in self.refused:
            raise UserError(self.refused[name])
        known = ", ".join(f"/{n}" for n in sorted(self.commands))
        raise UserError(f"there is no command /{name}" + (f"; the commands are {known}" if known else ""))


def invocation(text: str) -> tuple[str, str] | None:
    """`(name, arguments)` when `text` calls a command (`/NAME args`), else None: text not starting with `/`,
    or whose first word holds another `/` (a path such as `/etc/hosts`)."""
    match = _INVOCATION.fullmatch(text.strip())
    if match is None:
        return None
    return match.group(1), (match.group(2) or "").strip()


def expand(template: str, arguments: str, positional: Sequence[str] | None = None) -> str:
    """`template` with `$ARGUMENTS` and `$1`... replaced (`positional`: the arguments one by one; by default
    `arguments` split as a shell splits words). With no placeholder, non-empty arguments are appended."""
    if positional is None:
        try:
            positional = shlex.split(arguments)
        except ValueError:  # an unclosed quote: split on spaces
            positional = arguments.split()
    args = list(positional)
    used = False

    def put(match: re.Match[str]) -> str:
        nonlocal used
        used = True
        if match.group(1) is None:
            return arguments
        n = int(match.group(1))
        return args[n - 1] if n <= len(args) else ""

    text = _PLACEHOLDER.sub(put, template)
    if not used and arguments.strip():
        text = f"{text.rstrip()}\n\nARGUMENTS: {arguments}"
    return text


def validate_name(name: str) -> str | None:
    """Why `name` cannot name a command, or None."""
    if len(name) > MAX_NAME:
        return f"the name is {len(name)} characters; at most {MAX_NAME}"
    if not _NAME.fullmatch(name):
        return "a name may hold only a-z, 0-9, and - or _ between them"
    if name in BUILTIN:
        return f"/{name} is a built-in chat command; rename the file"
    return None


def parse_command(name: str, source: Source, path: Path, data: bytes) -> Command:
    """The command in the file's bytes; `ValueError` saying what is wrong."""
    from ..skills import parse

    try:
        text = data.decode("utf-8").removeprefix("\ufeff").replace("\r\n", "\n")
    except UnicodeDecodeError:
        raise ValueError("it is not UTF-8 text") from None
    front: dict[str, Any] = {}
    body = text
    if text.split("\n", 1)[0].rstrip() == "---":
        try:
            front, body = parse(text)
        except ValueError as e:  # worded for SKILL.md
            raise ValueError(str(e).replace("SKILL.md's front matter", "the front matter")) from None
    description, hint = front.get("description", ""), front.get("argument-hint", "")
    if not isinstance(description, str) or not isinstance(hint, str):
        raise ValueError("description and argument-hint must be text")
    if len(description) > MAX_DESCRIPTION:
        raise ValueError(f"the description is {len(description)} characters; at most {MAX_DESCRIPTION}")
    tools = front.get("allowed-tools")
    if isinstance(tools, str):
        tools = tools.replace(",", " ").split()
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, str) for t in tools)):
        raise ValueError("allowed-tools must be a list of tool names")
    if not body.strip():
        raise ValueError("it has no text after its front matter")
    return Command(name, source, path, body.strip(), " ".join(description.split()), " ".join(hint.split()),
                   None if tools is None else tuple(tools))


def _files(base: Path, parts: tuple[str, ...]) -> dict[str, bytes | None]:
    """`NAME.md` -> bytes of each regular file of the folder `base/parts...` (no symlink followed below `base`,
    at most MAX_COMMAND_BYTES; one that cannot be read maps to None, so it is listed as broken)."""
    from ..skills.dirs import open_dir

    try:
        fd = open_dir(base, parts)
    except OSError:
        return {}
    out: dict[str, bytes | None] = {}
    try:
        with os.scandir(fd) as entries:
            names = sorted(e.name for e in entries if e.name.endswith(".md") and not e.name.startswith(".")
                           and not e.is_dir(follow_symlinks=False))
        for name in names[:MAX_COMMANDS]:
            try:
                file_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
            except OSError:
                out[name] = None
                continue
            out[name] = read_closing(file_fd, MAX_COMMAND_BYTES)
    finally:
        os.close(fd)
    return out


def workspace_command_files(workspace: Path) -> dict[Path, bytes]:
    """The workspace's command files, as `shou trust` records them."""
    root = Path(workspace).resolve()
    return {root.joinpath(*WORKSPACE_PARTS, name): data for name, data in _files(root, WORKSPACE_PARTS).items()
            if data is not None}


def _scan(found: dict[str, bytes | None], source: Source, folder: Path, out: CommandSet, accept: Accept | None,
          trust_hint: str) -> None:
    for file, data in found.items():
        name = file[:-3]
        path = folder / file
        problem = validate_name(name)
        if data is None:
            problem = problem or f"it is a symlink or not a regular file of at most {MAX_COMMAND_BYTES} bytes"
        elif problem is None and accept is not None and not accept(path, data):
            why = f"the workspace command /{name} ({path}) is not trusted as it is now (new, or changed since " \
                  f"`shou trust`); read it, then run `shou trust` in {trust_hint}"
            out.listed.append(Listed(name, source, path, "not trusted: run `shou trust`"))
            out.refused[name] = why
            out.commands.pop(name, None)
            continue
        if problem is None and data is not None:
            try:
                command = parse_command(name, source, path, data)
            except ValueError as e:
                problem = str(e)
            else:
                out.commands[name] = command
                out.refused.pop(name, None)
                out.listed.append(Listed(name, source, path, "valid", command.description))
                continue
        out.listed.append(Listed(name, source, path, problem))
        out.refused[name] = f"the command /{name} ({path}) cannot run: {problem}"
        out.commands.pop(name, None)


def load_commands(workspace: Path | None, user_dir: Path | None, accept: Accept | None) -> CommandSet:
    """The commands of `user_dir` (the user's, trusted) and of the workspace's `.agents/commands/` (each only
    when `accept(path, bytes)` says a person trusted those exact bytes; None: all of them). A workspace
    command overrides (or, when refused, shadows) the user's of the same name."""
    out = CommandSet()
    if user_dir is not None:
        folder = Path(os.path.abspath(user_dir))
        _scan(_files(folder, ()), "user", folder, out, None, "")
    if workspace is not None:
        root = Path(workspace).resolve()  # the path `shou trust` records
        found = _files(root, WORKSPACE_PARTS)
        mine = {file[:-3] for file in found}
        out.listed = [entry if entry.name not in mine or not entry.valid else
                      Listed(entry.name, entry.source, entry.path, "overridden by the workspace command of the same "
                             "name", entry.description) for entry in out.listed]
        _scan(found, "workspace", root.joinpath(*WORKSPACE_PARTS), out, accept, str(root))
    return out


def user_commands_dir(env: Any = None) -> Path:
    """The user's commands folder: `commands/` beside the user's shou.toml."""
    from ..config import user_config_dir

    return user_config_dir(env if env else None) / "commands"


def discover(workspace: Path, env: Any = None) -> CommandSet:
    """The commands `/NAME` can run in `workspace`: the user's, and the workspace's as trusted now."""
    from .state import trust_entries

    entries = trust_entries(env)
    return load_commands(workspace, user_commands_dir(env), lambda path, data: entries.get(str(path)) == digest(data))
