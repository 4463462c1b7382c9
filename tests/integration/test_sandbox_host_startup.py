"""Sandboxed code cannot write what the host runs code from or trusts, when it lies in the workspace.

Red-team report: with the workspace at `$HOME`, code in the sandbox wrote
`~/.local/lib/python3.11/site-packages/usercustomize.py` (imported by the next `shou` on the host, as
root), `~/.bashrc`, `~/.profile`, `~/.ssh/authorized_keys` and `~/.cache/shou` (the response cache); in a
project, a `*.pth` in the `.venv` holding the running shou (run at every `shou` start).
"""

from __future__ import annotations

import site
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shou.sandbox.base import Limits, Sandbox

from .test_sandbox_privileges import CONTAINMENT, make, release

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="both backends need Linux")

SITE = ".local/lib/python3.11/site-packages"
VENV_SITE = ".venv/lib/python3.11/site-packages"
ATTACKS = {
    "bashrc": "echo 'id > /tmp/pwned' >> .bashrc",
    "profile (missing)": "echo 'id > /tmp/pwned' > .profile",
    "bash_profile (missing)": "echo 'id > /tmp/pwned' > .bash_profile",
    "usercustomize": f"mkdir -p {SITE} && echo 'import os' > {SITE}/usercustomize.py",
    "rename .local away": f"mv .local .local-old && mkdir -p {SITE} && echo 'import os' > {SITE}/usercustomize.py",
    "authorized_keys": "mkdir -p .ssh && echo 'ssh-ed25519 AAAA evil' >> .ssh/authorized_keys",
    "response cache": "mkdir -p .cache/shou && echo x > .cache/shou/x",
    "venv .pth": f"echo 'import os' > {VENV_SITE}/evil.pth",
    "rename .venv away": f"mv .venv .venv-old && mkdir -p {VENV_SITE} && echo 'import os' > {VENV_SITE}/evil.pth",
    "sitecustomize (workspace on sys.path)": "echo 'import os' > sitecustomize.py",
}
PLANTED = [".profile", ".bash_profile", f"{SITE}/usercustomize.py", ".ssh/authorized_keys", ".cache/shou/x",
           f"{VENV_SITE}/evil.pth", ".local-old", ".venv-old", "sitecustomize.py"]


@pytest.fixture
def home(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The workspace as $HOME, with a `.venv` holding the Python that runs shou."""
    (workspace / VENV_SITE).mkdir(parents=True)
    (workspace / ".local" / "share").mkdir(parents=True)
    (workspace / ".bashrc").write_text("# mine\n")
    monkeypatch.setenv("HOME", str(workspace))
    monkeypatch.setenv("SHOU_CONFIG_DIR", str(workspace / ".config" / "shou"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("PYTHONUSERBASE", raising=False)
    monkeypatch.setattr(site, "USER_BASE", None)
    monkeypatch.setattr(site, "USER_SITE", None)
    monkeypatch.setattr(sys, "prefix", str(workspace / ".venv"))
    # `python -m shou` run in the workspace puts it on sys.path too.
    monkeypatch.setattr(sys, "path", [*sys.path, str(workspace / VENV_SITE), str(workspace)])
    return workspace


@pytest.fixture
def sb(backend: str, home: Path) -> Iterator[Sandbox]:
    box = make(backend, home, Limits(timeout=60))
    yield box
    release(box)


@pytest.fixture(params=CONTAINMENT)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_the_host_start_up_files_cannot_be_written(sb: Sandbox, home: Path, attack: str) -> None:
    r = await sb.run(["bash", "-c", ATTACKS[attack]])
    again = await sb.run(["bash", "-c", "echo fine > notes.txt && mkdir -p src && echo x > src/a.py && cat notes.txt"])
    assert again.stdout.strip() == "fine", again  # the rest of the workspace stays writable
    assert (home / "src" / "a.py").read_text() == "x\n"
    assert (home / ".bashrc").read_text() == "# mine\n", r
    for rel in PLANTED:
        assert not (home / rel).exists(), (rel, r)


# Review 47, finding 6: the config folder's top folder was bound read-only but readable, so one command
# (`cp .config/shou/approvals.key leak.bin`) copied the key that signs approvals, and the API keys in
# shou.toml, into a workspace file that `shou serve`'s files API hands to any token holder.
LEAKS = {
    "cat": "cat .config/shou/approvals.key",
    "cp": "cp .config/shou/approvals.key leak.bin; cat leak.bin",
    "iconv": "iconv -t utf-16le .config/shou/shou.toml > leak.bin; cat leak.bin",
    "ls": "ls -A .config/shou",
    "find": "find .config -name '*.key' -o -name shou.toml",
}


@pytest.mark.parametrize("leak", list(LEAKS))
async def test_the_config_folder_cannot_be_read(sb: Sandbox, home: Path, leak: str) -> None:
    await sb.run(["true"])  # a warm sandbox made before the folder was: replaced once it is there
    config = home / ".config" / "shou"
    config.mkdir(parents=True)
    (config / "approvals.key").write_bytes(b"SECRET-APPROVALS-KEY")
    (config / "shou.toml").write_text('api_key = "SECRET-API-KEY"\n')
    (home / ".config" / "other").mkdir()
    (home / ".config" / "other" / "settings").write_text("visible\n")
    for _ in range(2):  # the warm sandbox's second call too
        r = await sb.run(["bash", "-c", LEAKS[leak]])
        assert "SECRET" not in r.stdout + r.stderr, r
        assert "approvals.key" not in r.stdout and "shou.toml" not in r.stdout, r
        leaked = home / "leak.bin"
        data = leaked.read_bytes() if leaked.exists() else b""
        assert b"SECRET" not in data and b"S\x00E\x00C" not in data, r
    # the rest of .config/ and the workspace are as before
    r = await sb.run(["bash", "-c", "cat .config/other/settings; ls -A .config; echo ok > notes.txt; cat notes.txt"])
    assert r.stdout.split() == ["visible", "other", "shou", "ok"], r
    assert (config / "approvals.key").read_bytes() == b"SECRET-APPROVALS-KEY"
    # still not writable
    r = await sb.run(["bash", "-c", "echo x > .config/shou/new; mv .config/shou .config/gone; ls -A .config"])
    assert not (config / "new").exists() and config.is_dir(), r
