"""Glob matching for list_files: the same answers as fnmatch, in time that cannot blow up."""

from __future__ import annotations

import asyncio
import fnmatch
import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from shou.tools.base import ToolContext
from shou.tools.builtin.files import list_files
from shou.tools.globbing import MAX_DEPTH, Glob

names = st.text(alphabet="ab.-_", min_size=1, max_size=8).filter(lambda n: n not in (".", ".."))
components = st.one_of(st.text(alphabet="ab.*?[]!-", min_size=1, max_size=6).filter(lambda c: "**" not in c
                                                                                      and c != "."),
                       st.just("**"))


def reference(pattern: list[str], path: list[str]) -> bool:
    """What a glob means, written the slow, obvious way: '**' takes zero or more whole components."""
    if not pattern:
        return not path
    if pattern[0] == "**":
        return reference(pattern[1:], path) or (bool(path) and reference(pattern, path[1:]))
    return bool(path) and fnmatch.fnmatchcase(path[0], pattern[0]) and reference(pattern[1:], path[1:])


def full_match(glob: Glob, path: list[str]) -> bool:
    n = len(glob.fixed)
    return tuple(path[:n]) == glob.fixed and glob.match(tuple(path[n:]))


@given(st.lists(components, min_size=1, max_size=4), st.lists(names, min_size=1, max_size=5))
def test_globs_mean_what_fnmatch_and_double_star_mean(pattern: list[str], path: list[str]) -> None:
    assert full_match(Glob.parse("/".join(pattern)), path) == reference(pattern, path)


async def test_a_pathological_pattern_returns(tmp_path: Path) -> None:
    (tmp_path / ("a" * 200)).touch()
    pattern = "*a" * 30 + "*b"
    out = await asyncio.wait_for(list_files.call(list_files.validate({"pattern": pattern}), ToolContext(tmp_path)), 30)
    assert out == f"no files match {pattern!r}"
    deep = "**/" * 40 + "*b"
    out = await asyncio.wait_for(list_files.call(list_files.validate({"pattern": deep}), ToolContext(tmp_path)), 30)
    assert out == f"no files match {deep!r}"


async def test_a_very_deep_tree_is_cut_not_crashed(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)
    for _ in range(MAX_DEPTH * 3):  # deeper than a path name may be: made one level at a time
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(fd)
    out = str(await list_files.call(list_files.validate({"pattern": "**/*"}), ToolContext(tmp_path)))
    assert out.startswith("d/\nd/d/") and f"deeper than {MAX_DEPTH} levels" in out
