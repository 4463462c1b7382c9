"""`beneath.remove_at` / `remove_tree`: a tree of any depth removed without recursion, no link followed."""

from __future__ import annotations

import os
from pathlib import Path

from shou.beneath import remove_at, remove_tree

from ..fixtures.deep import chain


def test_a_tree_thousands_deep_is_removed(deep_tmp: Path) -> None:
    chain(deep_tmp / "t", 3000)
    assert remove_tree(deep_tmp / "t")
    assert not (deep_tmp / "t").exists()


def test_a_bounded_removal_gives_up_below_its_depth_and_says_so(deep_tmp: Path) -> None:
    chain(deep_tmp / "t", 300)
    fd = os.open(deep_tmp, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert not remove_at(fd, "t", most_depth=256)
        assert (deep_tmp / "t").is_dir()
        assert remove_at(fd, "t")
    finally:
        os.close(fd)
    assert not (deep_tmp / "t").exists()


def test_links_are_removed_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("theirs")
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "to-folder").symlink_to(outside)
    (tree / "a" / "to-file").symlink_to(outside / "keep")
    (tmp_path / "link").symlink_to(outside)
    assert remove_tree(tree) and not tree.exists()
    assert remove_tree(tmp_path / "link") and not (tmp_path / "link").exists()
    assert (outside / "keep").read_text() == "theirs"


def test_folders_of_many_entries_and_many_folders(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(2500):  # past one batch of the scan
        (tree / f"f{i}").write_bytes(b"")
    for i in range(1500):
        (tree / f"d{i}").mkdir()
        (tree / f"d{i}" / "x").write_bytes(b"")
    assert remove_tree(tree) and not tree.exists()


def test_nothing_there_is_gone_and_a_file_is_removed(tmp_path: Path) -> None:
    assert remove_tree(tmp_path / "none")
    (tmp_path / "file").write_text("x")
    assert remove_tree(tmp_path / "file") and not (tmp_path / "file").exists()
