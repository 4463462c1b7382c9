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


# A repository the program makes and registers in the index as a submodule: `git status` would enter it and
# obey its config. Then the workspace laid out as a bare repository (no .git) with a config of its own.
SUBMODULE_TRICK = """
set -e
mkdir evil && cd evil && git init -q && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m e
git config core.fsmonitor 'id > /workspace/pwned; false'
cd .. && git update-index --add --cacheinfo 160000,$(git -C evil rev-parse HEAD),evil
git status --short
"""
BARE_TRICK = """
mkdir -p bare/objects bare/refs && echo 'ref: refs/heads/main' > bare/HEAD
printf '[core]\\n\\tbare = true\\n\\tfsmonitor = "id > /workspace/pwned"\\n' > bare/config
cd bare && git log 2>&1; git status 2>&1; true
"""


async def test_git_in_the_sandbox_obeys_no_planted_submodule_or_bare_repository(workspace: Path) -> None:
    git_repo(workspace)
    box = make("bubblewrap", workspace, Limits(timeout=60))  # the host's git is there; the Docker image has none
    try:
        sub = await box.run(["bash", "-c", SUBMODULE_TRICK])
        bare = await box.run(["bash", "-c", BARE_TRICK])
    finally:
        release(box)
    assert sub.ok and "A  evil" in sub.stdout, sub.for_model()
    assert not (workspace / "pwned").exists()
    assert "cannot use bare repository" in bare.stdout, bare.for_model()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_git_settings_that_outrank_config_files_reach_the_sandbox(backend: str, workspace: Path) -> None:
    box = make(backend, workspace, Limits(timeout=60))
    try:
        r = await box.run(["bash", "-c", "env | grep ^GIT_CONFIG_ | sort"])
    finally:
        release(box)
    assert "GIT_CONFIG_KEY_0=core.fsmonitor" in r.stdout and "GIT_CONFIG_VALUE_1=all" in r.stdout, r.for_model()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_submodule_repositories_are_read_only_too(backend: str, workspace: Path) -> None:
    git_repo(workspace)
    module = workspace / ".git" / "modules" / "lib" / "inner"  # a submodule named with a slash
    git_repo(module)
    subprocess.run(["git", "-C", str(module), "config", "core.bare", "false"], check=True)
    nested = module / ".git"
    nested.rename(workspace / "gitdir-tmp")
    module.rmdir()
    (workspace / "gitdir-tmp").rename(module)
    box = make(backend, workspace, Limits(timeout=60))
    try:
        r = await box.run(["bash", "-c", "echo x >> .git/modules/lib/inner/config; "
                                         "echo x > .git/modules/lib/inner/hooks/post-checkout"])
    finally:
        release(box)
    assert r.stderr.count("Read-only file system") == 2, r.for_model()
