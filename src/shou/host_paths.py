"""What of the workspace belongs to the host: shou's configuration folder, and what the host runs code from or
trusts (the Python running shou, and in a workspace of `$HOME` its shells' start-up files, `~/.ssh`,
`~/.local`, ...), wherever the workspace holds them. The sandboxes bind these read-only and the file tools
refuse to write there (shou.workspace), so sandboxed code cannot change what runs outside the sandbox."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from .errors import UserError

__all__ = ["HOME_FILES", "HOME_FOLDERS", "config_parts", "hidden_config", "host_parts", "missing_host_files",
           "read_only_tops"]


def config_parts(workspace: Path) -> list[tuple[str, ...]]:
    """Where the user's shou config folder (trusted settings, trust approvals) lies inside `workspace`, as
    spelled and as resolved: [] when it is outside, `()` when it is the workspace itself."""
    from .config import user_config_dir

    return _inside_parts(str(user_config_dir()), workspace)


def hidden_config(workspace: Path) -> list[str]:
    """The config folder's paths inside `workspace` (`config_parts`) that a sandbox covers with an empty
    read-only folder, so that sandboxed code cannot read its keys and settings (the read-only bind of the top
    folder, `read_only_tops`, only stops writes): each one that is a real folder, reached through no symlink.
    One missing cannot be made from inside: its top folder is read-only there."""
    found: list[str] = []
    for parts in config_parts(workspace):
        if not parts:
            continue
        path = str(workspace)
        for name in parts:
            path = os.path.join(path, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                break
            if not stat.S_ISDIR(mode):
                break
        else:
            rel = "/".join(parts)
            if rel not in found:
                found.append(rel)
    return found


# What the host runs or trusts in a home folder: shells' start-up files, ssh keys, git's config, and the folders
# of user-installed Python packages (`~/.local`, whose usercustomize.py the next `shou` imports), settings
# (`~/.config`) and shou's response cache (a cache that could be written would answer any tool call).
HOME_FILES = (".bashrc", ".bash_profile", ".bash_login", ".profile", ".zshrc", ".zprofile", ".zshenv", ".bash_logout",
              ".inputrc", ".gitconfig", ".pam_environment")
HOME_FOLDERS = (".ssh", ".local", ".config", ".cache/shou")


def _bases(workspace: Path) -> tuple[str, ...]:
    """The workspace as given and as resolved (resolved once: a sandboxed call asks about ~20 host paths)."""
    return tuple(dict.fromkeys((os.path.abspath(workspace), os.path.realpath(workspace))))


def _inside_parts(path: str, workspace: Path, bases: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """`path`'s components below `workspace`, as spelled and as resolved (each against the workspace as given
    and as resolved: `bases`, when the caller has them), or [] when it lies outside."""
    found: list[tuple[str, ...]] = []
    for candidate in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
        for base in bases or _bases(workspace):
            rel = os.path.relpath(candidate, base)
            parts = tuple(p for p in rel.split("/") if p not in ("", "."))
            if rel != ".." and not rel.startswith("../") and parts not in found:
                found.append(parts)
    return found


def host_parts(workspace: Path) -> list[tuple[tuple[str, ...], bool]]:
    """What the host runs code from or trusts that lies inside `workspace`, as (components, is a folder):
    the Python running shou (its prefixes, shou's own package, the user site) and, when the home folder
    is inside, its `HOME_FILES` and `HOME_FOLDERS`. Sandboxed code writing there would run on the host,
    outside the sandbox, at the next `shou` (a `.pth` in a project's `.venv`) or the next login.

    Of the other `sys.path` entries (a project's own `src/` of an editable install, `PYTHONPATH`, the working
    folder of `python -m shou`) only the `sitecustomize.py` and `usercustomize.py` Python imports at every start
    are listed, and in the workspace's top (and the working folder) a module or package named `shou`: the
    project's code stays writable (its packages are not what shou imports: site-packages come first, and
    `python -m shou` drops its working folder from the path), except shou's own package when shou runs from the
    workspace (working on shou itself)."""
    import importlib.machinery
    import site
    import sys

    found: list[tuple[tuple[str, ...], bool]] = []
    bases = _bases(workspace)

    def add(path: str, folder: bool) -> None:
        for parts in _inside_parts(path, workspace, bases):
            if (parts, folder) not in found:
                found.append((parts, folder))

    for prefix in {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}:
        add(prefix, True)
    add(os.path.dirname(os.path.abspath(__file__)), True)  # shou's own code
    for entry in sys.path:
        for name in ("sitecustomize.py", "usercustomize.py"):
            add(os.path.join(entry or os.getcwd(), name), False)
    # `python -m shou` looks for shou itself in the folder it starts in before anywhere else (it takes that
    # folder off sys.path before any other import: shou/__init__.py), so there a `shou.py`, `shou/__init__.py`
    # or a compiled form of either would be what runs: the workspace's top, where shou is run, and this one's.
    suffixes = importlib.machinery.all_suffixes()
    for parts in dict.fromkeys(((), *_inside_parts(os.getcwd(), workspace, bases))):  # resolved once, not by name
        for name in (*(("shou" + x,) for x in suffixes), *(("shou", "__init__" + x) for x in suffixes)):
            if ((*parts, *name), False) not in found:
                found.append(((*parts, *name), False))
    with contextlib.suppress(Exception):  # site may be disabled (-S) or its user site unknown
        add(site.getuserbase(), True)
        add(site.getusersitepackages(), True)
    for home in {os.path.expanduser("~"), os.path.realpath(os.path.expanduser("~"))}:
        if home == "~" or not _inside_parts(home, workspace, bases):
            continue
        for name in HOME_FILES:
            add(os.path.join(home, name), False)
        for name in HOME_FOLDERS:
            add(os.path.join(home, name), True)
    return found


def _missing_file(workspace: Path, parts: tuple[str, ...], folder: bool) -> bool:
    """Whether `parts` is a file that is not there, on a way of plain folders (or of none yet): a way through
    a link of the person's own leads elsewhere, and what is removed later must never be followed (git_protect)."""
    if folder or os.path.lexists(workspace.joinpath(*parts)):
        return False
    for i in range(1, len(parts)):
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISDIR(os.lstat(workspace.joinpath(*parts[:i])).st_mode):
                return False
    return True


def _mode(path: Path) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def missing_host_files(workspace: Path) -> tuple[str, ...]:
    """The start-up files of `host_parts` missing in the workspace (`HOME_FILES` in a workspace of `$HOME`, a
    `sitecustomize.py` of a `sys.path` entry): the sandbox cannot bind them (see `read_only_tops`, whose second
    list is these, for a caller that needs both), so a file the program makes there is removed after its call."""
    return tuple(dict.fromkeys("/".join(parts) for parts, folder in host_parts(workspace)
                               if parts and _missing_file(workspace, parts, folder)))


def read_only_tops(workspace: Path) -> tuple[list[str], list[str]]:
    """The workspace's top-level names a sandbox binds read-only, so that nothing the host trusts can be
    written from inside (`config_parts`, `host_parts`), and the top-level files among them that are missing.

    The whole top folder is bound, not just the path: else the program could rename a parent away and put a
    folder of its own in its place. A missing top folder is made (empty, 0700: it may become ~/.ssh) so that
    it can be bound. A missing file directly in the workspace is not made: an empty `.bash_profile` or
    `.inputrc` would change what the host's shells read (bash then skips `.profile`, readline
    `/etc/inputrc`); the sandbox removes such a file after each call instead (`git_protect.remove_planted`).
    `UserError` when the workspace itself is one of them, or a top one is a symlink or no plain file or folder:
    sandboxed code could redirect or replace it.
    """
    tops: list[str] = []
    absent: list[str] = []
    for parts in config_parts(workspace):
        if not parts:
            raise UserError(f"the workspace {workspace} is shou's own configuration folder; sandboxed code "
                            "would be able to change trusted settings. Run shou in another folder")
        if parts[0] not in tops:
            tops.append(parts[0])
    for parts, folder in host_parts(workspace):
        if not parts:
            raise UserError(f"the workspace {workspace} holds the Python that runs shou; sandboxed code would be "
                            "able to change what shou runs. Run shou in another folder")
        if not folder and not os.path.lexists(workspace.joinpath(*parts)):
            # missing: removed when the program makes it; behind a link of the person's own, the place it leads
            # to is listed by its resolved spelling
            if _missing_file(workspace, parts, folder):
                if "/".join(parts) not in absent:
                    absent.append("/".join(parts))
            elif len(parts) > 1 and parts[0] not in tops and (stat.S_ISREG(mode := _mode(workspace / parts[0]))
                                                              or stat.S_ISLNK(mode)):
                # A file of the person's where the way's top folder would be (a launcher script named `shou`):
                # kept as it is, else the program could put that folder and the start-up file in its place. A
                # link there is refused below, as any link among these is (it cannot be bound as itself).
                tops.append(parts[0])
        elif parts[0] not in tops:
            tops.append(parts[0])
    for top in tops:
        with contextlib.suppress(FileExistsError):  # on the real path: root cannot create through an idmap
            os.mkdir(workspace / top, 0o700)
            with contextlib.suppress(OSError):  # the workspace owner's, not root's
                owner = os.stat(workspace)
                os.lchown(workspace / top, owner.st_uid, owner.st_gid)
        st = os.lstat(workspace / top)
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            raise UserError(f"{workspace / top} holds or leads to what the host runs or trusts (shell start-up "
                            "files, Python packages, shou's configuration) but is not a plain file or folder (a "
                            "symlink?): sandboxed code could redirect it. Run shou in another folder")
    return tops, absent
