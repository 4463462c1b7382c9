"""Path globs (`src/**/*.py`) and a bounded walk of the workspace that follows no symlink.

The pattern comes from the model, so it must not be able to stall shou: each path component is matched
by `shou.glob.glob_match` (fnmatch's meaning in linear time, where fnmatch's own regex backtracks and
holds the GIL so no timeout fires) and `**` with a table over components (O(pattern x depth)). The walk
holds at most `MAX_DEPTH` open folders, looks at most at `limit` entries and stops at a deadline.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..glob import glob_match

__all__ = ["MAX_DEPTH", "Glob", "Walk"]

MAX_DEPTH = 64


@dataclass(frozen=True)
class Glob:
    """A pattern split into components: literal folders to start from, then what is matched."""

    fixed: tuple[str, ...]
    parts: tuple[str, ...]

    @classmethod
    def parse(cls, pattern: str) -> Glob:
        """`ValueError` with the reason for a pattern that cannot be used."""
        parts = [p for p in pattern.split("/") if p not in ("", ".")]
        if not parts:
            raise ValueError("it names no file")
        if any("**" in p and p != "**" for p in parts):
            raise ValueError("'**' can only be a whole path component, e.g. 'src/**/*.py'")
        fixed = []
        while len(parts) > 1 and not any(c in parts[0] for c in "*?["):
            fixed.append(parts.pop(0))  # 'src/**/*.py' never reads docs/
        return cls(tuple(fixed), tuple(parts))

    @property
    def depth(self) -> int | None:
        """How deep below the start a match can be (None: any depth)."""
        return None if "**" in self.parts else len(self.parts)

    def match(self, rel: tuple[str, ...]) -> bool:
        """Whether the path components below the start (`rel`) match."""
        pats = self.parts
        # reach[i]: the first i pattern components can match the path components consumed so far.
        reach = [True] + [False] * len(pats)
        for i, tok in enumerate(pats):
            if tok == "**" and reach[i]:
                reach[i + 1] = True  # ** may match no component
        for name in rel:
            nxt = [False] * (len(pats) + 1)
            for i, tok in enumerate(pats):
                if not reach[i]:
                    continue
                if tok == "**":
                    nxt[i] = True  # ** takes this component and may take more
                    nxt[i + 1] = True
                elif glob_match(name, tok):
                    nxt[i + 1] = True
            for i, tok in enumerate(pats):  # a ** reached now may also match nothing more
                if tok == "**" and nxt[i]:
                    nxt[i + 1] = True
            reach = nxt
            if not any(reach):
                return False
        return reach[-1]


class Walk:
    """A bounded walk from an open folder: no symlink followed, `skip` folders left out, matches collected."""

    def __init__(self, glob: Glob, *, limit: int, seconds: float, skip: frozenset[str],
                 skip_paths: Callable[[tuple[str, ...]], bool] | None = None) -> None:
        self.glob = glob
        self.limit = limit
        self.skip = skip
        self.skip_paths = skip_paths  # left out, with all below it: given the path from the workspace root
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds
        self.found: list[str] = []
        self.seen = 0
        self.stopped = ""

    def run(self, fd: int) -> None:
        """Walk the folder `fd` (closed when done)."""
        prefix = "/".join(self.glob.fixed)
        stack: list[tuple[int, os.ScandirIterator[str], tuple[str, ...]]] = [(fd, os.scandir(fd), ())]
        depth = self.glob.depth
        try:
            while stack and not self.stopped:
                dir_fd, entries, rel = stack[-1]
                entry = next(entries, None)
                if entry is None:
                    stack.pop()
                    entries.close()
                    os.close(dir_fd)
                    continue
                self.seen += 1
                if self.seen > self.limit:
                    self.stopped = f"the limit is {self.limit}"
                elif self.seen % 1024 == 0 and time.monotonic() > self.deadline:
                    self.stopped = f"the time limit is {self.seconds:g} s"
                if self.stopped or entry.name in self.skip:
                    continue
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue
                here = (*rel, entry.name)
                if self.skip_paths is not None and self.skip_paths((*self.glob.fixed, *here)):
                    continue
                is_dir = stat.S_ISDIR(mode)
                if self.glob.match(here):
                    shown = "/".join((prefix, *here) if prefix else here)
                    self.found.append(shown + ("/" if is_dir else "@" if stat.S_ISLNK(mode) else ""))
                if is_dir and (depth is None or len(here) < depth):
                    if len(stack) >= MAX_DEPTH:
                        self.stopped = f"folders nest deeper than {MAX_DEPTH} levels"
                        continue
                    try:
                        child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                        dir_fd=dir_fd)
                    except OSError:
                        continue
                    stack.append((child, os.scandir(child), here))
        finally:
            for dir_fd, entries, _ in stack:
                entries.close()
                os.close(dir_fd)
