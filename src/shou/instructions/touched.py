"""The workspace paths a tool call touches, read simply from its arguments: a file tool's path (any tool's
argument named like one), `list_files`' pattern up to its first wildcard, and in a shell line the folder
after `cd`/`pushd` and every word that looks like a relative or absolute path (it holds a `/`).

This decides only which folders' `AGENTS.md` the model is shown next (shou.instructions.nested), never what
a call may do: a path missed here means a folder's instructions come later or not at all, nothing more.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

__all__ = ["literal_prefix", "shell_paths", "touched_paths"]

PATH_KEYS = ("path", "file", "file_path", "filename", "directory", "dir", "folder", "cwd", "paths", "files")
MAX_PATHS = 50  # per call: a call naming more is not worth more opens
MAX_SHELL = 10_000  # characters of a shell line read for paths
MAX_PATH = 4096  # characters of a path worth looking at (PATH_MAX)
_WILDCARDS = "*?[{"
_READ_WHOLE = ("list_files", "shell")  # tools whose other arguments name paths


def touched_paths(name: str, arguments: str) -> list[str]:
    """The paths the call `name(arguments)` (its JSON arguments as the model sent them) names."""
    if name not in _READ_WHOLE and "\\u" not in arguments and not any(key in arguments for key in PATH_KEYS):
        return []  # no path's key in the text, nor an escape that could spell one: nothing to parse for
    try:
        args = json.loads(arguments) if arguments else {}
    except ValueError:
        return []
    if not isinstance(args, dict):
        return []
    out: list[str] = []
    for key in PATH_KEYS:
        _add(out, args.get(key))
    if name == "list_files" and isinstance(args.get("pattern"), str):
        out.append(literal_prefix(args["pattern"]))
    if name == "shell" and isinstance(args.get("command"), str):
        out += shell_paths(args["command"])
    return [p for p in out if p][:MAX_PATHS]


def _add(out: list[str], value: Any) -> None:
    if isinstance(value, str) and len(value) <= MAX_PATH:
        out.append(literal_prefix(value))
    elif isinstance(value, list):
        out += [literal_prefix(v) for v in value[:MAX_PATHS] if isinstance(v, str) and len(v) <= MAX_PATH]


def literal_prefix(path: str) -> str:
    """`path` up to the folder before its first wildcard (`src/api/**/*.py` -> `src/api`)."""
    cut = min((i for i in (path.find(c) for c in _WILDCARDS) if i >= 0), default=-1)
    return path if cut < 0 else path[:cut].rpartition("/")[0]


def shell_paths(command: str) -> list[str]:
    """The folders a shell line `cd`s into and the words of it that look like paths."""
    lexer = shlex.shlex(command[:MAX_SHELL], posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # an unclosed quote: the words as split on spaces are near enough
        words = command[:MAX_SHELL].split()
    out: list[str] = []
    previous = ""
    for word in words:
        if word.startswith("-") and "=" in word:  # --file=src/x.py
            word = word.partition("=")[2]
        if previous in ("cd", "pushd") and not word.startswith("-"):
            out.append(word)
        elif "/" in word and not word.startswith(("-", "~")) and "://" not in word and "$" not in word:
            out.append(literal_prefix(word))
        previous = word
        if len(out) >= MAX_PATHS:
            break
    return out
