"""The allowlist rewrite of a repository the program made (git_disarm.py), and the walk that finds every
repository of the workspace (git_protect.py), without a sandbox: the host's git reads and writes the files."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shou.git_disarm import disarm, is_allowed, read_config, write_config
from shou.git_protect import Protected, protect, remove_planted

GIT = shutil.which("git")
pytestmark = pytest.mark.skipif(GIT is None, reason="needs the host's git")

ALLOWED_KEYS = ["core.bare", "core.filemode", "user.name", "user.email", "extensions.objectformat",
                "remote.{}.url", "remote.{}.fetch", "branch.{}.merge", "submodule.{}.url"]
DENIED_KEYS = ["core.fsmonitor", "core.hookspath", "core.pager", "core.editor", "core.sshcommand", "include.path",
               "includeif.{}.path", "filter.{}.clean", "filter.{}.process", "diff.{}.textconv", "alias.{}",
               "remote.{}.uploadpack", "remote.{}.receivepack", "submodule.{}.update", "core.{}.bare",
               "credential.helper", "gpg.program", "sequence.editor"]


def test_is_allowed() -> None:
    assert all(is_allowed(k.format("Origin")) for k in ALLOWED_KEYS)
    assert not any(is_allowed(k.format("x")) for k in DENIED_KEYS)


names = st.from_regex(r"[a-z][a-z0-9-]{0,6}", fullmatch=True)  # a valid name, for a subsection or a setting
values = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc"), max_codepoint=0x3ff) | st.sampled_from(
    "\n\t\"\\;# "), max_size=12)
entries = st.lists(st.tuples(st.sampled_from(ALLOWED_KEYS + DENIED_KEYS), names, values), max_size=5)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries)
def test_a_rewritten_config_holds_exactly_the_allowed_settings(tmp_path: Path,
                                                              chosen: list[tuple[str, str, str]]) -> None:
    assert GIT is not None
    with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
        written: list[tuple[str, str | None]] = [(key.format(name), value) for key, name, value in chosen]
        # A key as git spells it back: section and name lower case, the subsection as written.
        data = write_config(written)
        read = read_config(GIT, data, Path(scratch))
        assert read == written
        repo = Path(scratch) / "repo"
        repo.mkdir()
        (repo / "config").write_bytes(data)
        disarm(Path(scratch), ["repo"])
        after = read_config(GIT, (repo / "config").read_bytes(), Path(scratch))
        assert after == [(k, v) for k, v in (read or []) if is_allowed(k)]


def by_key(entries: list[tuple[str, str | None]]) -> dict[str, list[str | None]]:
    """Each key's values, in order."""
    found: dict[str, list[str | None]] = {}
    for key, value in entries:
        found.setdefault(key, []).append(value)
    return found


def lay_out(folder: Path, config: str) -> Path:
    (folder / "objects").mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / "config").write_text(config)
    return folder


def test_includes_hooks_links_and_unreadable_configs(tmp_path: Path) -> None:
    repo = lay_out(tmp_path / "a" / ".git", '[include]\n\tpath = more\n[user]\n\tname = M\n')
    (repo / "more").write_text("[core]\n\tfsmonitor = x\n")
    (repo / "hooks").mkdir()
    for name in ("pre-commit", "post-checkout.sample"):
        (repo / "hooks" / name).write_text("#!/bin/sh\n")
        (repo / "hooks" / name).chmod(0o755)
    (repo / "hooks" / "post-merge").symlink_to("../../evil")
    (repo / "worktrees" / "w").mkdir(parents=True)
    (repo / "worktrees" / "w" / "config.worktree").write_text("[core]\n\tpager = x\n")
    broken = lay_out(tmp_path / "b", "[core\n")
    linked = lay_out(tmp_path / "c", "")
    (linked / "config").unlink()
    (linked / "config").symlink_to(repo / "more")
    note = disarm(tmp_path, ["a/.git", "b", "c"])
    assert "a/.git (removed include.path from config" in note and "made hooks/pre-commit not executable" in note
    assert (repo / "config").read_text() == "[user]\n\tname = \"M\"\n"
    assert not (repo / "hooks" / "pre-commit").stat().st_mode & 0o111
    assert (repo / "hooks" / "post-checkout.sample").stat().st_mode & 0o111  # git runs no hook by that name
    assert not os.path.lexists(repo / "hooks" / "post-merge")
    assert "pager" not in (repo / "worktrees" / "w" / "config.worktree").read_text()
    assert not (broken / "config").exists() and not os.path.lexists(linked / "config")
    assert (repo / "more").exists()  # what a link led to is left alone


def test_every_repository_of_the_workspace_is_protected_and_only_new_ones_disarmed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for rel in ("", "proj", "a/b/lib", ".venv/pkg", ".shou/x"):
        subprocess.run(["git", "init", "-q", str(ws / rel)], check=True)
    subprocess.run(["git", "-C", str(ws / "proj"), "config", "alias.st", "status"], check=True)
    person = (ws / "proj" / ".git" / "config").read_bytes()
    protected = protect(ws, skip=(".venv",))
    assert protected.git_dirs == (".git", "proj/.git", "a/b/lib/.git")
    assert {"proj/.git/config", "proj/.git/hooks", "a/b/lib/.git/config"} <= set(protected.read_only)
    lay_out(ws / "new" / ".git", "[alias]\n\tx = !evil\n")
    lay_out(ws / "proj" / "inner", "[alias]\n\tx = !evil\n")
    (ws / "w").mkdir()
    (ws / "w" / ".git").write_text("gitdir: ../laid\n")
    lay_out(ws / "laid", "[alias]\n\tx = !evil\n")
    note = remove_planted(ws, protected)
    assert all(f"{rel} (removed alias.x from config)" in note for rel in ("new/.git", "proj/inner", "laid")), note
    assert (ws / "proj" / ".git" / "config").read_bytes() == person
    assert remove_planted(ws, Protected((), ())) == ""  # none looked for before: nothing is taken for new


def test_room_for_the_binds_of_many_repositories_or_a_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    import resource

    from shou.errors import UserError
    from shou.git_protect import fd_room

    set_to: list[tuple[int, int]] = []
    monkeypatch.setattr(resource, "setrlimit", lambda _which, limits: set_to.append(limits))
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (1024, 100_000))
    fd_room(3000)  # raised: a bind left out for want of a descriptor would leave a repository writable
    assert set_to and 3000 < set_to[0][0] <= 100_000
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (1024, 2048))
    with pytest.raises(UserError, match="ulimit"):
        fd_room(3000)


# Anything git can hold: any character but NUL in a value, any but NUL and newline in a subsection name.
any_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=12)
subsections = any_text.filter(lambda t: "\n" not in t)
allowed_entries = st.lists(st.tuples(st.sampled_from(["remote.{}.url", "branch.{}.merge", "submodule.{}.url",
                                                      "core.bare", "user.name"]), subsections,
                                     any_text | st.none()), max_size=6)


@settings(max_examples=60, deadline=None)
@given(allowed_entries)
def test_the_writer_is_read_back_by_git_exactly(chosen: list[tuple[str, str, str | None]]) -> None:
    """One pass writes the kept settings; git reads them back as they were (else `disarm` removes the config)."""
    assert GIT is not None
    written = [(key.format(name), value) for key, name, value in chosen]
    with tempfile.TemporaryDirectory() as scratch:
        assert read_config(GIT, write_config(written), Path(scratch)) == written


def test_a_config_git_reads_otherwise_than_written_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    import shou.git_disarm

    repo = lay_out(tmp_path / "r" / ".git", "[user]\n\tname = M\n[alias]\n\tx = !evil\n")
    monkeypatch.setattr(shou.git_disarm, "write_config", lambda _entries: b"[user]\n\tname = other\n")
    note = disarm(tmp_path, ["r/.git"])
    assert "removed config" in note and not (repo / "config").exists(), note


def test_many_settings_are_disarmed_at_once(tmp_path: Path) -> None:
    import time

    repo = lay_out(tmp_path / "r" / ".git", "[user]\n" + "".join(f"\tname = n{i}\n" for i in range(8000)) +
                   "[alias]\n\tx = !evil\n")
    start = time.perf_counter()
    disarm(tmp_path, ["r/.git"])
    assert time.perf_counter() - start < 5  # one git to read, one to check: 53 s with a git per setting
    assert (repo / "config").read_text().count("name = ") == 8000
