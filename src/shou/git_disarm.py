"""Repositories that sandboxed code made in the workspace, disarmed after its call.

The sandbox keeps the person's repositories read-only where git takes orders from (`git_protect`), but
the program may make a new one anywhere it can write: `git init sub`, a `sub/.git/config` written by
hand, a `.git` file naming a folder it laid out, a folder laid out as a bare repository. Inside the sandbox
`GIT_ENV` keeps git from obeying it; on the host, the person (or their editor, which runs `git status` in
every repository it finds) runs git there later, outside any sandbox, and git runs what that config names
(`core.fsmonitor`, `core.pager`, filter drivers, aliases, `include.path`, ...) and the hooks it finds.

So after each call every repository folder that was not there before it is disarmed: its config files keep
only settings that run nothing (`ALLOWED`), read and rewritten by the host's own git (never a parser of
ours, which could read a file differently from git), and its hooks lose their execute bits (git ignores a
hook it cannot execute; the content stays; a hook that is one of several links to a file is unlinked instead,
as the file may be a person's script). A `commondir` naming a folder that was no repository folder before the
call is removed (git would take config and hooks from there); one naming a person's repository (a worktree the
program added with `git worktree add`) stays.

The work is bounded (`CONFIG_CAP` config files read per call, two runs of git each); past it, a new
repository's config files are removed unread. An error in one repository never leaves the others armed: that
one is named in the note as not disarmed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import subprocess
import tempfile
from functools import partial
from pathlib import Path

from .beneath import lexists_at, open_folder, remove_at
from .git_walk import pointer_readings, resolve

__all__ = ["ALLOWED", "disarm", "is_allowed", "no_exec", "read_config", "replace_at", "some",
           "unlink_at", "write_config"]

# Settings that name no program, no file to read more settings from and no place to take hooks from.
ALLOWED = frozenset({
    "core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates", "core.ignorecase",
    "core.precomposeunicode", "core.symlinks", "core.autocrlf", "core.eol", "extensions.objectformat",
    "extensions.refstorage", "extensions.worktreeconfig", "user.name", "user.email", "init.defaultbranch",
    "lfs.repositoryformatversion",
})
# The same for settings of a named remote, branch or submodule (`remote.<name>.url`).
ALLOWED_NAMED = {
    "remote": frozenset({"url", "pushurl", "fetch", "tagopt", "prune"}),
    "branch": frozenset({"remote", "merge", "rebase", "pushremote"}),
    "submodule": frozenset({"url", "active", "branch"}),
}
CONFIG_LIMIT = 2**20  # a config is a few hundred bytes; a bigger one is removed, not read
CONFIG_CAP = 100  # config files read (by git, twice each) in one call; past it they are removed unread
_GIT_TIMEOUT = 30
_REMOVE_DEPTH = 256  # folders removed below one name; deeper, it is left and said (never a recursion)


def is_allowed(key: str) -> bool:
    """Whether a config key as `git config --list` spells it (section and name lower case) runs nothing."""
    section, _, rest = key.partition(".")
    if "." not in rest:
        return key in ALLOWED
    return rest.rpartition(".")[2] in ALLOWED_NAMED.get(section, frozenset())


# What the tidy removes is bounded (it runs on the event loop): a folder deeper than `_REMOVE_DEPTH` is left
# and named, never a recursion.
unlink_at = partial(remove_at, most_depth=_REMOVE_DEPTH)


def disarm(workspace: Path, repositories: list[str], keep: frozenset[tuple[int, int]] = frozenset()) -> str:
    """Disarm the repository folders (workspace-relative) that the program made, but a folder that is one of
    `keep` (device, inode: the person's, the repository folders before the call) once opened; a note naming each
    one and what was removed from it, and any that could not be disarmed, or ""."""
    if not repositories:
        return ""
    # Without git on the host nothing there can obey a config: it is left as written (hooks are still disarmed).
    git = shutil.which("git")
    done, failed = [], []
    budget = [CONFIG_CAP, 0]  # config files still to read; those removed unread past the cap
    with tempfile.TemporaryDirectory(prefix="shou-git-") as scratch:
        for rel in repositories:
            try:
                fd = open_folder(workspace, rel.split("/"))
            except (OSError, ValueError):
                continue  # gone (or a link now): nothing there git would read as this folder
            try:
                st = os.fstat(fd)  # what was opened, should a program still running have moved folders since
                changes = [] if (st.st_dev, st.st_ino) in keep else _disarm_one(fd, git, Path(scratch), keep, budget)
            except Exception:  # one repository's error (or a bug) never leaves the others armed
                failed.append(rel)
                continue
            finally:
                os.close(fd)
            if any(c.startswith("could not") for c in changes):
                failed.append(rel)
            if changes:
                done.append(f"{rel} ({some(changes)})")
    notes = []
    if done:
        notes.append(f"disarmed the git repositories the program made: {some(done)}; git on the host would run "
                     "what their config and hooks name")
    if budget[1]:
        notes.append(f"{budget[1]} config files past the first {CONFIG_CAP} were removed unread: too many to read "
                     "in one call")
    if failed:
        notes.append(f"{some(failed)} could not be disarmed; do not run git in it")
    return "; ".join(notes)


def some(items: list[str], most: int = 10) -> str:
    """At most `most` of `items`, then how many more: a note stays short however much the program made (and
    printable: a name that is no UTF-8 shows its odd bytes as U+FFFD)."""
    shown = ", ".join(i.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for i in items[:most])
    return f"{shown} and {len(items) - most} more" if len(items) > most else shown


def _disarm_one(repo_fd: int, git: str | None, scratch: Path, keep: frozenset[tuple[int, int]],
                budget: list[int]) -> list[str]:
    """Clean the config files of the repository folder `repo_fd` (reading at most `budget[0]` of them, which it
    lowers; `budget[1]` counts those removed unread), drop a `commondir` naming no repository folder of `keep`,
    and disarm its hooks; what was done."""
    changes = []
    for folder, name in _config_files(repo_fd):
        shown = name if folder == "." else f"{folder}/{name}"
        try:
            fd = open_folder(repo_fd, folder.split("/"))
        except (OSError, ValueError):
            continue
        change = ""
        try:
            if budget[0] <= 0 and lexists_at(fd, name):
                # Past the cap the program made these by the hundred: gone unread, so no call pays more than it.
                if removed := unlink_at(fd, name):
                    budget[1] += 1
                change = f"removed {shown} unread" if removed else f"could not remove {shown}"
            elif git is not None:
                if lexists_at(fd, name):
                    budget[0] -= 1
                change = _clean_config(fd, name, shown, git, scratch)
        except FileNotFoundError:
            change = ""  # gone meanwhile: nothing there for git to read
        except (OSError, ValueError, RecursionError):
            change = f"could not clean {shown}"
        finally:
            os.close(fd)
        if change:
            changes.append(change)
    changes += _foreign_commondir(repo_fd, keep)
    changes += _disarm_hooks(repo_fd)
    return changes


def _foreign_commondir(repo_fd: int, keep: frozenset[tuple[int, int]]) -> list[str]:
    """Remove the folder's `commondir` unless each reading of it names a repository folder of `keep` (a linked
    worktree of the person's repository that the program added keeps it); what was done."""
    if not lexists_at(repo_fd, "commondir"):
        return []
    try:
        keeps = _names_kept(repo_fd, keep)
    except (OSError, ValueError, RecursionError):
        keeps = False  # unreadable, dangling, a chain of links: not the person's repository's
    if keeps:
        return []
    return ["removed commondir (it named no repository of the person's)"] if unlink_at(repo_fd, "commondir") else [
        "could not remove commondir"]


def _config_files(repo_fd: int) -> list[tuple[str, str]]:
    """(folder, name) of each config file git may read in a repository folder: its `config` and
    `config.worktree`, and each linked worktree's `config.worktree` (submodules are repository folders of
    their own)."""
    files = [(".", "config"), (".", "config.worktree")]
    with contextlib.suppress(OSError):
        wt = open_folder(repo_fd, ("worktrees",))
        try:
            files += [(f"worktrees/{e.name}", "config.worktree") for e in os.scandir(wt)
                      if e.is_dir(follow_symlinks=False)]
        finally:
            os.close(wt)
    return files


def _clean_config(dir_fd: int, name: str, shown: str, git: str, scratch: Path) -> str:
    """Keep only the allowed settings of the config file `name` in `dir_fd` (`shown` in the note); what was
    done ("" for nothing)."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return ""
    if not stat.S_ISREG(st.st_mode) or st.st_size > CONFIG_LIMIT:
        return _remove_unreadable(dir_fd, name, shown)
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # swapped since it was looked at
            return _remove_unreadable(dir_fd, name, shown)
        data = f.read(CONFIG_LIMIT)
    entries = read_config(git, data, scratch)
    if entries is None:
        return _remove_unreadable(dir_fd, name, shown)
    kept = [(k, v) for k, v in entries if is_allowed(k)]
    removed = sorted({k for k, _ in entries if not is_allowed(k)})
    if not removed:
        return ""
    data = write_config(kept)
    # Read back by the host's git: the kept settings exactly, or no config at all (git takes none as empty).
    if read_config(git, data, scratch) != kept:
        return _remove_unreadable(dir_fd, name, shown)
    try:
        replace_at(dir_fd, name, data, st)
    except OSError:  # no clean one could be written: no config at all rather than the program's
        return _remove_unreadable(dir_fd, name, shown)
    return f"removed {some(removed)} from {shown}"


def _remove_unreadable(dir_fd: int, name: str, shown: str) -> str:
    # Git takes a missing config as an empty one: nothing of it is lost that git could have read.
    return f"removed {shown}, which git cannot read (a missing config is empty to git)" if unlink_at(
        dir_fd, name) else f"could not remove {shown}"


def _git_env(scratch: Path) -> dict[str, str]:
    """Git with no settings but the file it is given: none of the host's, none of the environment's."""
    return {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(scratch), "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"}


def read_config(git: str, data: bytes, scratch: Path) -> list[tuple[str, str | None]] | None:
    """The settings of a config file's bytes, as git reads them (`--file` follows no `include`), in order;
    a setting with no value (`[core] bare`) has None. None when git cannot read it."""
    path = scratch / f"in-{secrets.token_hex(6)}"
    path.write_bytes(data)
    try:
        done = subprocess.run([git, "config", "--file", str(path), "--list", "-z"], capture_output=True,
                              env=_git_env(scratch), cwd=scratch, timeout=_GIT_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError):  # git gone or stuck: as unreadable (the config is removed)
        return None
    finally:
        path.unlink()
    if done.returncode != 0:
        return None
    entries: list[tuple[str, str | None]] = []
    for item in done.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]:
        key, sep, value = item.partition("\n")
        entries.append((key, value if sep else None))
    return entries


def write_config(entries: list[tuple[str, str | None]]) -> bytes:
    """A config file holding `entries` (keys as `git config --list` spells them; None: a setting with no value),
    in one pass: `[section "sub"]` headers and quoted values with git's escapes. The caller reads it back with
    git (`read_config`), which is what decides: a key this cannot spell comes back otherwise."""
    lines = []
    current = None
    for key, value in entries:
        section, _, rest = key.partition(".")
        sub, _, name = rest.rpartition(".")
        header = f'[{section} "{_escape(sub, sub=True)}"]' if "." in rest else f"[{section}]"
        if header != current:
            lines.append(header)
            current = header
        lines.append(f"\t{name}" if value is None else f'\t{name} = "{_escape(value)}"')
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape") if lines else b""


def _escape(text: str, *, sub: bool = False) -> str:
    """Git's escapes inside double quotes (a subsection name knows only backslash and quote)."""
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return text if sub else text.replace("\n", "\\n").replace("\t", "\\t").replace("\b", "\\b")


def replace_at(dir_fd: int, name: str, data: bytes, like: os.stat_result) -> None:
    """Put `data` in place of `name` in `dir_fd` at once (a new file renamed over it), with its owner and mode."""
    tmp = f".{name}.shou-{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            with contextlib.suppress(OSError):  # the repository's owner's, not root's
                os.fchown(f.fileno(), like.st_uid, like.st_gid)
            os.fchmod(f.fileno(), stat.S_IMODE(like.st_mode) & 0o666)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def _names_kept(repo_fd: int, keep: frozenset[tuple[int, int]]) -> bool:
    """Whether every reading of the folder's `commondir` names a folder of `keep` (OSError when one names none)."""
    fd = os.open("commondir", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=repo_fd)
    try:
        data = os.read(fd, 1 << 16) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    finally:
        os.close(fd)
    here = os.fsencode(os.readlink(f"/proc/self/fd/{repo_fd}"))  # the folder's path now, as git would start there
    readings = pointer_readings(data, dotgit=False)
    for named in readings:
        st = os.stat(resolve(os.path.join(here, named)))
        if (st.st_dev, st.st_ino) not in keep:
            return False
    return bool(readings)


def _disarm_hooks(repo_fd: int) -> list[str]:
    """Take the execute bits off each hook (a link there, which git would follow to a program, is removed;
    `hooks` itself too when a link)."""
    try:
        if stat.S_ISLNK(os.lstat("hooks", dir_fd=repo_fd).st_mode):
            return ["removed the link hooks"] if unlink_at(repo_fd, "hooks") else []
        fd = open_folder(repo_fd, ("hooks",))
    except OSError:
        return []
    changes = []
    try:
        for entry in os.scandir(fd):
            if entry.is_symlink():
                if unlink_at(fd, entry.name):
                    changes.append(f"removed the link hooks/{entry.name}")
            elif entry.name.endswith(".sample"):
                continue  # git's examples (`git init` copies them): git runs no hook by that name
            elif entry.is_file(follow_symlinks=False) and (done := no_exec(fd, entry.name)):
                changes.append(done.format(f"hooks/{entry.name}"))
    finally:
        os.close(fd)
    return changes


def no_exec(dir_fd: int, name: str) -> str:
    """Clear the execute bits of the hook file `name`, reached without following a link, or unlink it when it has
    other names (a hard link to a person's script, whose mode is theirs: the hook's name goes, the file stays);
    what was done ("{}" standing for the hook), "" when it was not executable."""
    with contextlib.suppress(OSError):
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
                return ""
            if st.st_nlink > 1:
                os.unlink(name, dir_fd=dir_fd)
                return "removed {} (another name of a file elsewhere, whose mode stays)"
            # An O_PATH fd cannot be fchmod-ed; its /proc name is that very file, whatever the program renames.
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) & ~0o111)
            return "made {} not executable"
        finally:
            os.close(fd)
    return ""
