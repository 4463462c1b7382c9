"""Issue 28, item 3: a repository's config and hooks are read-only to sandboxed code and to the file tools.

The model wrote `.git/config` (`core.fsmonitor = "id > x"`) and a narrowly allowed `git status` ran it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shou.errors import ToolError
from shou.sandbox.base import Limits
from shou.tools.base import ToolContext
from shou.tools.builtin.files import edit_file, write_file

from .test_sandbox_privileges import BACKENDS, make, release

FSMONITOR = '[core]\n\tfsmonitor = "id > pwned"\n'


def git_repo(root: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def git_status_runs_nothing(root: Path) -> bool:
    """Run `git status` on the host, as an allowed command would, and see whether a planted command ran."""
    subprocess.run(["git", "-C", str(root), "status", "--short"], capture_output=True, timeout=60)
    return not (root / "pwned").exists()


async def write(root: Path, path: str, content: str = FSMONITOR) -> None:
    await write_file.call(write_file.validate({"path": path, "content": content}), ToolContext(workspace=root))


@pytest.mark.parametrize("path", [".git/config", ".git/hooks/pre-commit", ".git/hooks/fsmonitor-watchman",
                                  ".GIT/Config", ".git/config.worktree", ".git/commondir", "sub/.git/config",
                                  ".git/modules/lib/config", ".git/modules/lib/hooks/post-checkout"])
async def test_file_tools_refuse_a_repositorys_config_and_hooks(workspace: Path, path: str) -> None:
    git_repo(workspace)
    before = (workspace / ".git" / "config").read_bytes()
    with pytest.raises(ToolError, match="git repository's configuration, hooks"):
        await write(workspace, path)
    assert (workspace / ".git" / "config").read_bytes() == before
    assert git_status_runs_nothing(workspace)


async def test_edit_file_refuses_git_config(workspace: Path) -> None:
    git_repo(workspace)
    with pytest.raises(ToolError, match="git repository's configuration"):
        await edit_file.call(edit_file.validate({"path": ".git/config", "old": "[core]", "new": FSMONITOR}),
                             ToolContext(workspace=workspace))
    assert "fsmonitor" not in (workspace / ".git" / "config").read_text()


async def test_file_tools_cannot_point_git_at_a_folder_of_their_own(workspace: Path) -> None:
    # No repository yet: a `.git` file naming a folder the model wrote would make that folder the config.
    with pytest.raises(ToolError, match="pointer"):
        await write(workspace, ".git", "gitdir: evil\n")
    # A repository whose .git is a file (a worktree, a submodule) pointing inside the workspace.
    git_repo(workspace / "real")
    (workspace / ".git").write_text("gitdir: real/.git\n")
    with pytest.raises(ToolError, match="git repository's configuration"):
        await write(workspace, "real/.git/config")
    # .git as a symlink to a repository folder elsewhere in the workspace: its config is protected too.
    (workspace / ".git").unlink()
    (workspace / "store.git").mkdir()
    (workspace / "store.git" / "config").write_text("[core]\n")
    (workspace / ".git").symlink_to("store.git")
    with pytest.raises(ToolError, match="git repository's configuration"):
        await write(workspace, "store.git/config")
    await write(workspace, "notes.txt", "ordinary files are still writable\n")


SANDBOX_ATTACKS = [
    f"printf '{FSMONITOR}' >> .git/config",
    "printf '#!/bin/sh\\nid > pwned\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
    "mv .git/config .git/config.old && printf '[core]\\n\\tfsmonitor = \"id > pwned\"\\n' > .git/config",
    "rm -rf .git/hooks && mkdir .git/hooks",
    "ln -sf /workspace/evil .git/config",
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("attack", range(len(SANDBOX_ATTACKS)))
async def test_sandboxed_code_cannot_rewrite_git_config_or_hooks(backend: str, attack: int, workspace: Path) -> None:
    git_repo(workspace)
    (workspace / "evil").write_text(FSMONITOR)
    config = (workspace / ".git" / "config").read_bytes()
    box = make(backend, workspace, Limits(timeout=60))
    try:
        r = await box.run(["bash", "-c", SANDBOX_ATTACKS[attack]])
    finally:
        release(box)
    assert r.exit_code != 0 and ("Read-only file system" in r.stderr or "busy" in r.stderr), r.for_model()
    assert (workspace / ".git" / "config").read_bytes() == config
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert git_status_runs_nothing(workspace)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_worktree_pointer_is_read_only_in_the_sandbox(backend: str, workspace: Path) -> None:
    git_repo(workspace / "real")
    (workspace / ".git").write_text("gitdir: real/.git\n")
    box = make(backend, workspace, Limits(timeout=60))
    try:
        r = await box.run(["bash", "-c", "echo 'gitdir: evil' > .git; echo x >> real/.git/config"])
    finally:
        release(box)
    assert r.stderr.count("Read-only file system") == 2, r.for_model()
    assert (workspace / ".git").read_text() == "gitdir: real/.git\n"
