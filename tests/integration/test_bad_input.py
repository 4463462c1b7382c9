"""Bad input never shows a traceback: each case ends with a clear message (or goes on), nothing lost."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import shou_env


def shou_bytes(tmp_path: Path, workspace: Path, *args: bytes | str, stdin: bytes | None = None,
               server=None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "shou", *args], cwd=workspace, env=shou_env(tmp_path, server),
                          input=stdin, capture_output=True, timeout=120)


def no_traceback(r: subprocess.CompletedProcess) -> str:
    err = r.stderr.decode(errors="replace") if isinstance(r.stderr, bytes) else r.stderr
    assert "Traceback" not in err, err
    return err


def test_a_task_that_is_not_utf8(serve, tmp_path: Path, workspace: Path) -> None:
    srv = serve([{"text": "never asked"}])
    r = shou_bytes(tmp_path, workspace, "run", b"caf\xe9 au lait", server=srv)
    assert r.returncode == 2 and "not valid UTF-8" in no_traceback(r)
    r = shou_bytes(tmp_path, workspace, "run", "-", stdin=b"na\xefve \xff task", server=srv)
    assert r.returncode == 2 and "not valid UTF-8" in no_traceback(r) and "0xef" in no_traceback(r)
    assert srv.requests == []


def test_an_oversized_task_is_refused_with_a_hint(serve, tmp_path: Path, workspace: Path) -> None:
    srv = serve([{"text": "never asked"}])
    r = shou_bytes(tmp_path, workspace, "run", "-", stdin=b"x" * 2_000_000, server=srv)
    assert r.returncode == 2 and "the limit is" in no_traceback(r) and "file" in no_traceback(r)
    assert srv.requests == []


def test_a_damaged_session_log_is_kept_and_a_fresh_one_started(serve, tmp_path: Path, workspace: Path) -> None:
    (workspace / ".shou").mkdir()
    (workspace / ".shou" / "shou.db").write_bytes(b"this is not a database, it is a grocery list\n" * 100)
    srv = serve([{"text": "fine"}])
    r = shou_bytes(tmp_path, workspace, "run", "hello", server=srv)
    err = no_traceback(r)
    assert r.returncode == 0 and "damaged" in err and "fresh session log" in err
    [kept] = (workspace / ".shou").glob("shou.db.damaged-*")
    assert kept.read_bytes().startswith(b"this is not a database")  # the old file is kept as it was
    assert sqlite3.connect(workspace / ".shou" / "shou.db").execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_shou_folder_that_is_a_file_or_an_unwritable_workspace(serve, tmp_path: Path, workspace: Path) -> None:
    srv = serve([{"text": "never asked"}])
    (workspace / ".shou").write_text("not a folder")
    r = shou_bytes(tmp_path, workspace, "run", "hi", server=srv)
    assert r.returncode == 2 and ".shou is not a folder" in no_traceback(r)
    (workspace / ".shou").unlink()
    readonly = tmp_path / "ro"
    readonly.mkdir()
    if os.geteuid() == 0:  # root ignores modes: a read-only file system it is
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(readonly)])
        if mounted.returncode != 0:
            pytest.skip("cannot mount a read-only tmpfs here")
    else:
        readonly.chmod(0o555)
    try:
        r = shou_bytes(tmp_path, readonly, "run", "hi", server=srv)
        assert r.returncode == 2 and "cannot create" in no_traceback(r)
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(readonly)])
    assert srv.requests == []


def test_a_functions_file_that_exits(serve, tmp_path: Path, workspace: Path) -> None:
    (workspace / "tools.py").write_text("import sys\nprint('usage: tools.py FILE')\nsys.exit(3)\n")
    r = shou_bytes(tmp_path, workspace, "run", "hi", "--functions", "tools.py", server=serve([]))
    assert r.returncode == 2 and "sys.exit(3)" in no_traceback(r)


@pytest.mark.parametrize(("line", "says"), [
    (b'{"text": "caf\xe9"}', "not valid UTF-8"),
    (b'{"text": "lone \\ud800 surrogate"}', "not valid Unicode"),
    (b'{"text": "when", "time": NaN}', "not JSON"),
    (b'{"text": "when", "time": 1e300}', "out of range"),
    (b'{"text": "when", "time": -1e16}', "out of range"),
    (b'{"text": "tag", "tags": ["ok", "\\udfff"]}', "not valid Unicode"),
])
def test_memory_import_names_the_bad_line_and_keeps_the_store_usable(tmp_path: Path, workspace: Path, line: bytes,
                                                                      says: str) -> None:
    good = b'{"text": "the user likes green tea", "time": 1700000000}\n'
    (workspace / "m.jsonl").write_bytes(good + line + b"\n")
    r = shou_bytes(tmp_path, workspace, "memory", "import", "m.jsonl", "--bm25-only")
    err = no_traceback(r)
    assert r.returncode == 2 and "m.jsonl:2" in err and says in err
    listed = shou_bytes(tmp_path, workspace, "memory", "list")
    assert listed.returncode == 0, no_traceback(listed)


def test_memory_list_shows_bad_times_an_older_shou_stored(tmp_path: Path, workspace: Path) -> None:
    r = shou_bytes(tmp_path, workspace, "memory", "add", "a fact", "--bm25-only")
    assert r.returncode == 0, no_traceback(r)
    db = sqlite3.connect(workspace / ".shou" / "memory.db")
    db.execute("UPDATE memories SET time = ?", (1e300,))
    db.commit()
    listed = shou_bytes(tmp_path, workspace, "memory", "list")
    assert listed.returncode == 0 and b"a fact" in listed.stdout, no_traceback(listed)
    as_json = shou_bytes(tmp_path, workspace, "memory", "list", "--json")
    assert json.loads(as_json.stdout.splitlines()[0])["text"] == "a fact"
