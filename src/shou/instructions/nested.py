"""A folder's own `AGENTS.md` (or `CLAUDE.md`), shown to the model once the session touches a path in it.

A large repository keeps instructions beside the code they are about (`services/api/AGENTS.md`). A run reads
none of them up front: when a tool call of the session names a path (shou.instructions.touched), each folder
on the way to it is looked at once, and the files found there enter the system prompt from the next request
on, for the rest of the run. They go to the system prompt, not into the tool result that touched the folder,
because they are the project's instructions, trusted by a person, while a tool result is data the model is
told not to obey; there they also outlive compaction and trimming, as the loaded skills do. The touched
folders are read from the session's messages, so a later run of the session (the next chat turn, a resumed
run) finds the same ones again without any state of its own.

Like the root files, each counts only as the exact bytes a person trusted with `shou trust` (which lists them
all: `nested_files`); one that is new or changed is left out with a warning. Folders whose name starts with
a dot and dependency folders (`node_modules`, ...) are never looked at, and the same bounds apply to the run
and to `shou trust`: `MAX_DEPTH` folders deep, `MAX_FILES` files a run, `MAX_CHARS` characters each.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..beneath import open_folder as folder_beneath
from ..errors import ToolError
from ..messages import Message
from ..trust import digest
from .state import ROOT_FILES, read_in, trust_entries, untrusted_warning
from .touched import touched_paths

__all__ = ["NestedInstructions", "folder_parts", "looked_at", "nested_files"]

NAMES = ROOT_FILES  # AGENTS.md, then CLAUDE.md, in each folder
SKIPPED = frozenset({"node_modules", "__pycache__", "site-packages", "venv"})
MAX_DEPTH = 8  # folders below the workspace
MAX_FILES = 8  # nested files one run adds to its system prompt
MAX_CHARS = 8_000  # of each
MAX_CHECKED = 256  # folders one run looks in
MAX_WALK = 20_000  # folders `shou trust` walks



def looked_at(name: str) -> bool:
    """Whether a folder of this name is one whose instructions count (not hidden, not dependencies)."""
    return not name.startswith(".") and name not in SKIPPED


def folder_parts(workspace: Path, path: str) -> list[tuple[str, ...]]:
    """The folders below the workspace on the way to `path` (and `path` itself, which may be one), outermost
    first, as far as they are looked at; [] for a path outside the workspace."""
    from ..workspace import relative_parts

    try:
        parts = relative_parts(workspace, path)
    except ToolError:
        return []
    out: list[tuple[str, ...]] = []
    for i, name in enumerate(parts[:MAX_DEPTH]):
        if not looked_at(name):
            break
        out.append(parts[:i + 1])
    return out


class NestedInstructions:
    """The nested instruction files one run has shown the model (`texts`: workspace-relative path -> text),
    grown by `update` as the session touches folders. Every run has one, most never see a folder: it holds
    no set of its own until one (issue 35: what each in-flight session holds)."""

    __slots__ = ("_checked", "_entries", "_full", "_scanned", "env", "texts", "workspace")

    def __init__(self, workspace: Path, env: Any = None) -> None:
        self.workspace = workspace if isinstance(workspace, Path) else Path(workspace)
        self.env = env
        self.texts: dict[str, str] = {}
        self._scanned = 0  # messages read
        self._checked: set[tuple[str, ...]] | None = None  # folders looked in, from the first one
        self._entries: dict[str, str] | None = None  # trusted.json, read when a first file is found
        self._full = False

    def update(self, messages: Sequence[Message]) -> list[str]:
        """Look in the folders the calls of `messages` since the last update touch; the warnings to tell (a
        file left out as not trusted, more files than a run takes)."""
        if len(messages) < self._scanned:  # the conversation was cleared: read it again
            self._scanned = 0
        warnings: list[str] = []
        for message in messages[self._scanned:]:
            for call in message.tool_calls:
                for path in touched_paths(call.name, call.arguments):
                    for folder in folder_parts(self.workspace, path):
                        checked = self._checked
                        if checked is None:
                            checked = self._checked = set()
                        if folder not in checked and len(checked) < MAX_CHECKED:
                            checked.add(folder)
                            warnings += self._look(folder)
        self._scanned = len(messages)
        return warnings

    def _look(self, folder: tuple[str, ...]) -> list[str]:
        found = read_folder(self.workspace, folder)
        if not found:
            return []
        root = self.workspace.resolve()  # the path `shou trust` records
        if self._entries is None:
            self._entries = trust_entries(self.env)
        warnings = []
        for name, data in found.items():
            path = root.joinpath(*folder, name)
            rel = "/".join((*folder, name))
            if self._entries.get(str(path)) != digest(data):
                warnings.append(untrusted_warning(path, root))
            elif name != NAMES[0] and found.get(NAMES[0]) == data and "/".join((*folder, NAMES[0])) in self.texts:
                continue  # CLAUDE.md a copy of AGENTS.md, which is shown: once is enough
            elif len(self.texts) >= MAX_FILES:
                if not self._full:
                    self._full = True
                    warnings.append(f"{path} and any further nested instructions are left out: a run takes at most "
                                    f"{MAX_FILES}")
            else:
                text = data.decode("utf-8", "replace")
                if len(text) > MAX_CHARS:
                    text = text[:MAX_CHARS] + f"\n[... cut at {MAX_CHARS} characters; read {rel} for the rest]"
                self.texts[rel] = text
        return warnings


def read_folder(workspace: Path, folder: tuple[str, ...]) -> dict[str, bytes]:
    """The instruction files (`NAMES`) in `folder` below the workspace, no symlink followed."""
    fd = open_folder(workspace, folder)
    if fd is None:  # no such folder (or a file, or a symlink): nothing there
        return {}
    try:
        return {name: data for name in NAMES if (data := read_in(fd, name)) is not None}
    finally:
        os.close(fd)


def open_folder(workspace: Path, folder: tuple[str, ...]) -> int | None:
    """`folder` below the workspace, opened without following a symlink on the way, or None."""
    try:
        return folder_beneath(workspace, folder)
    except OSError:
        return None


def nested_files(workspace: Path, notes: list[str] | None = None) -> dict[Path, bytes]:
    """Every nested instruction file a run could show the model (what `shou trust` lists and records): the
    folders walked as a run looks at them. A walk cut short by `MAX_WALK` adds a line to `notes`."""
    root = Path(workspace).resolve()
    out: dict[Path, bytes] = {}
    queue: deque[tuple[str, ...]] = deque([()])
    walked = 0
    while queue:
        folder = queue.popleft()
        walked += 1
        if walked > MAX_WALK:
            if notes is not None:
                notes.append(f"stopped looking for nested AGENTS.md after {MAX_WALK} folders of {root}")
            break
        for name, data in _walk_one(root, folder, queue).items():
            out[root.joinpath(*folder, name)] = data
    return out


def _walk_one(root: Path, folder: tuple[str, ...], queue: deque[tuple[str, ...]]) -> dict[str, bytes]:
    """The instruction files of `folder` (none at the workspace's top: those are the root files), queueing
    its subfolders."""
    fd = open_folder(root, folder)
    if fd is None:
        return {}
    try:
        if len(folder) < MAX_DEPTH:
            with os.scandir(fd) as entries:
                subs = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False) and looked_at(e.name))
            queue.extend((*folder, name) for name in subs)
        if not folder:
            return {}
        return {name: data for name in NAMES if (data := read_in(fd, name)) is not None}
    except OSError:
        return {}
    finally:
        os.close(fd)
