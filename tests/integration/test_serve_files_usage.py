"""`shou serve`'s workspace files, usage and config endpoints over real HTTP: the file tools' fence (no `.shou/`,
no `../`, no symlink, no git configuration), uploads a run can read, usage by day and model for the caller's
own sessions, and the currency costs are shown in."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ..fixtures.serving import Served, start_serve, stream_run
from .conftest import shou_env

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789ab"


@pytest.fixture
def served(serve, tmp_path: Path, workspace: Path) -> Iterator[tuple[Served, object]]:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"{ALICE} alice\n{BOB} bob\n")
    tokens.chmod(0o600)
    cfg = tmp_path / "config"
    cfg.mkdir(exist_ok=True)
    (cfg / "shou.toml").write_text('currency = "EUR"\ncurrency_per_usd = 0.9\n'
                                   '[models."scripted-test"]\ninput_price = 1.0\noutput_price = 2.0\n')
    srv = serve([{"tool_calls": [{"name": "read_file", "arguments": {"path": "inbox/data.csv"}}]},
                 {"text": "it holds a,b", "usage": {"prompt_tokens": 1000, "completion_tokens": 100}}],
                turn_by="history")
    s = start_serve(workspace, shou_env(tmp_path, srv), "--tokens", str(tokens))
    yield s, srv
    s.stop()


def _workspace(workspace: Path) -> None:
    (workspace / "notes.md").write_text("# Notes\n")
    (workspace / "page.html").write_text("<script>parent.document.title='owned'</script>")
    (workspace / "src").mkdir()
    (workspace / "src" / "main.py").write_text("print(1)\n")
    (workspace / ".git").mkdir()
    (workspace / ".git" / "config").write_text("[core]\n")
    (workspace / "link").symlink_to("/etc/passwd")
    (workspace / ".shou").mkdir(exist_ok=True)
    (workspace / ".shou" / "secret.txt").write_text("s3cret-of-the-state")


def test_a_file_name_that_is_not_utf8_does_not_break_the_listing(served, workspace: Path) -> None:
    import os

    (workspace / "sub").mkdir()
    (workspace / "sub" / os.fsdecode(b"caf\xe9.txt")).write_text("latin-1 name\n")
    (workspace / "sub" / "ok.txt").write_text("fine\n")
    with served[0].client(ALICE) as c:
        listed = c.get("/v1/files", params={"path": "sub"})
        assert listed.status_code == 200, listed.text
        assert sorted(e["name"] for e in listed.json()["entries"]) == ["caf\ufffd.txt", "ok.txt"]
        assert c.get("/v1/files", params={"path": ""}).status_code == 200


def test_the_workspace_is_listed_and_read_as_the_file_tools_see_it(served, workspace: Path) -> None:
    s, _ = served
    _workspace(workspace)
    with s.client(ALICE) as c:
        root = c.get("/v1/files").json()
        names = [(e["name"], e["type"]) for e in root["entries"]]
        assert names[0] == ("src", "dir") and ("notes.md", "file") in names and ("link", "symlink") in names
        assert not {".shou", ".git"} & {n for n, _ in names}
        assert [e["path"] for e in c.get("/v1/files", params={"path": "src"}).json()["entries"]] == ["src/main.py"]
        md = c.get("/v1/files/content", params={"path": "notes.md"})
        assert md.status_code == 200 and md.text == "# Notes\n" and md.headers["content-type"].startswith("text/")
        page = c.get("/v1/files/content", params={"path": "page.html"})
        assert page.headers["content-security-policy"].startswith("sandbox")  # opened alone, it runs nothing
        down = c.get("/v1/files/content", params={"path": "src/main.py", "download": "1"})
        assert 'attachment; filename="main.py"' in down.headers["content-disposition"]
        for path, code in ((".shou/secret.txt", 400), ("src/../.shou/secret.txt", 400), ("../outside", 400),
                           ("/etc/passwd", 400), ("link", 400), ("missing.txt", 404), ("src", 400)):
            r = c.get("/v1/files/content", params={"path": path})
            assert r.status_code == code, (path, r.text)
            assert "s3cret" not in r.text and "root:" not in r.text
        assert c.get("/v1/files", params={"path": ".shou"}).status_code == 400
        assert c.get("/v1/files", params={"path": "nope"}).status_code == 404
    assert httpx.get(s.url + "/v1/files").status_code == 401
    assert httpx.get(s.url + "/v1/files/content", params={"path": "notes.md"}).status_code == 401


def test_an_upload_lands_in_the_workspace_and_the_next_task_reads_it(served, workspace: Path) -> None:
    s, _ = served
    (workspace / ".git").mkdir()
    with s.client(ALICE) as c:
        up = c.put("/v1/files/content", params={"path": "inbox/data.csv"}, content=b"a,b\n1,2\n")
        assert up.status_code == 201 and up.json() == {"path": "inbox/data.csv", "size": 8}
        assert (workspace / "inbox" / "data.csv").read_bytes() == b"a,b\n1,2\n"
        for path in ("../x.txt", "/tmp/x.txt", ".shou/x.txt", ".git/config", ".git/hooks/pre-commit", ""):
            r = c.put("/v1/files/content", params={"path": path}, content=b"x")
            assert r.status_code == 400, (path, r.text)
        assert not (workspace.parent / "x.txt").exists() and not (workspace / ".shou" / "x.txt").exists()
        big = c.put("/v1/files/content", params={"path": "big.bin"}, content=b"\0" * (20 * 1024 * 1024 + 1))
        assert big.status_code == 413 and not (workspace / "big.bin").exists()
        run = c.post("/v1/runs", json={"task": "What is in inbox/data.csv?"}).json()
        events = stream_run(c, run["run_id"])
    finished = [m["data"] for m in events if m["event"] == "tool_call_finished"]
    assert "1,2" in finished[0]["content"] and not finished[0]["is_error"]
    assert events[-1]["event"] == "run_finished"


def test_usage_is_the_caller_s_own_by_day_and_model_and_costs_show_in_the_currency(served) -> None:
    s, _ = served
    with s.client(ALICE) as c:
        run = c.post("/v1/runs", json={"task": "What is in inbox/data.csv?"}).json()
        stream_run(c, run["run_id"])
        config = c.get("/v1/config").json()
        assert config["currency"] == {"code": "EUR", "symbol": "€", "per_usd": 0.9}
        assert config["model"] and "read_file" in config["tools"]
        mine = c.get("/v1/usage", params={"days": "7"}).json()
        assert c.get("/v1/usage", params={"days": "0"}).status_code == 400
    today = time.strftime("%Y-%m-%d", time.gmtime())
    (row,) = mine["rows"]
    assert row["day"] == today and row["model"] == "scripted-test" and row["requests"] == 2
    assert row["cost"] == pytest.approx(mine["total"]["cost"]) and row["cost"] > 0
    with s.client(BOB) as c:
        assert c.get("/v1/usage").json()["rows"] == []  # another user's runs are not counted, nor shown


def test_files_endpoints_are_in_the_openapi_document(served) -> None:
    s, _ = served
    with s.client(ALICE) as c:
        doc = c.get("/openapi.json").json()
    for path in ("/v1/files", "/v1/files/content", "/v1/usage", "/v1/config"):
        assert path in doc["paths"], path
    assert "put" in doc["paths"]["/v1/files/content"] and "get" in doc["paths"]["/v1/files/content"]


SERVER_KEY = "sk-SECRET-files-key-987654"


def test_a_file_is_served_with_the_server_s_secrets_replaced_and_the_config_folder_not_at_all(
        serve, tmp_path: Path, workspace: Path) -> None:
    # The files API answered a workspace's `.env` holding the server's own provider key raw to any token holder
    # (the model's read_file sees it redacted), and, with the person's configuration folder inside the
    # workspace (a workspace of $HOME), their shou.toml and the key that signs approvals and queued runs.
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"{ALICE} alice\n{BOB} bob\n")
    tokens.chmod(0o600)
    config = workspace / ".config" / "shou"
    config.mkdir(parents=True)
    (config / "shou.toml").write_text('api_key = "sk-CONFIG-secret-2222"\n')
    (config / "approvals.key").write_bytes(b"k" * 32)
    (workspace / ".env").write_bytes(b"SHOU_API_KEY=" + SERVER_KEY.encode() + b"\nOTHER=\xff\xfe\n")
    (workspace / "note.json").write_text(f'{{"key": "{SERVER_KEY}"}}')
    srv = serve([{"text": "ok"}])
    env = shou_env(tmp_path, srv, SHOU_API_KEY=SERVER_KEY, SHOU_CONFIG_DIR=str(config))
    s = start_serve(workspace, env, "--tokens", str(tokens))
    try:
        with s.client(BOB) as c:
            got = c.get("/v1/files/content", params={"path": ".env"})
            assert got.status_code == 200, got.text
            assert SERVER_KEY.encode() not in got.content and b"[redacted]" in got.content
            assert got.content.endswith(b"OTHER=\xff\xfe\n")  # the rest as it is, bytes that are not text too
            assert SERVER_KEY not in c.get("/v1/files/content", params={"path": "note.json",
                                                                        "download": "1"}).text
            for path in (".config/shou/shou.toml", ".config/shou/approvals.key", ".config/shou", "./.config//shou/"):
                r = c.get("/v1/files/content" if "." in path.rsplit("/", 1)[-1] else "/v1/files",
                          params={"path": path})
                assert r.status_code == 400 and "configuration folder" in r.text, (path, r.status_code, r.text)
                assert b"k" * 32 not in r.content and b"CONFIG-secret" not in r.content
            listed = c.get("/v1/files", params={"path": ".config"})
            assert listed.status_code == 200  # the folder that holds it is the workspace's
    finally:
        s.stop()


def test_a_file_is_served_with_the_server_s_key_hidden_in_other_encodings_too(
        serve, tmp_path: Path, workspace: Path) -> None:
    # A program in the sandbox can read the workspace's .env: `base64 .env > notes.txt` (or iconv to UTF-16,
    # xxd -p, a reversed copy) and the files API handed the key to any token holder, found only as spelled.
    import base64
    from urllib.parse import quote

    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"{ALICE} alice\n{BOB} bob\n")
    tokens.chmod(0o600)
    key = SERVER_KEY.encode()
    env_file = b"MODE=dev\nSHOU_API_KEY=" + key + b"\n"
    files = {
        "utf16.txt": "\ufeffSHOU_API_KEY=".encode("utf-16-le") + SERVER_KEY.encode("utf-16-le"),
        "utf16be.txt": ("SHOU_API_KEY=" + SERVER_KEY).encode("utf-16-be"),
        "env.b64": base64.encodebytes(env_file * 5),  # 76 columns: the key split across a line break too
        "env.b64url": base64.urlsafe_b64encode(b"xy" + env_file).rstrip(b"="),
        "env.hex": env_file.hex().upper().encode(),
        "link.txt": b"https://example.com/?k=" + quote(key, safe="").encode() + b"&all=" +
                    "".join(f"%{b:02x}" for b in key).encode(),
        "reversed.txt": key[::-1],
    }
    for name, data in files.items():
        (workspace / name).write_bytes(data)
    srv = serve([{"text": "ok"}])
    s = start_serve(workspace, shou_env(tmp_path, srv, SHOU_API_KEY=SERVER_KEY), "--tokens", str(tokens))
    try:
        with s.client(BOB) as c:
            got = {name: c.get("/v1/files/content", params={"path": name}) for name in files}
    finally:
        s.stop()
    assert all(r.status_code == 200 for r in got.values()), {n: r.status_code for n, r in got.items()}
    assert got["utf16.txt"].content.decode("utf-16") == "SHOU_API_KEY=[redacted]"
    assert got["utf16be.txt"].content.decode("utf-16-be") == "SHOU_API_KEY=[redacted]"
    decoded = base64.b64decode(got["env.b64"].content)
    assert key not in decoded and decoded.startswith(b"MODE=dev\nSHOU_API_KE") and decoded.count(b"SHOU_API_KE") == 5
    assert key not in base64.urlsafe_b64decode(got["env.b64url"].content + b"==")
    assert key not in bytes.fromhex(got["env.hex"].content.decode())
    assert got["link.txt"].content == b"https://example.com/?k=[redacted]&all=[redacted]"
    assert got["reversed.txt"].content == b"[redacted]"


def test_a_file_whose_name_holds_control_characters_downloads_with_a_plain_name(served, workspace: Path) -> None:
    # A name holding CR/LF (any run's shell can make one) made the Content-Disposition header illegal: the
    # server dropped the connection with no answer, and the page's Download button failed on it.
    for name in ("evil\r\nX-Injected: yes.txt", "tab\there.txt", "bell\x07\x7f.txt"):
        (workspace / name).write_text("data\n")
        with served[0].client(ALICE) as c:
            r = c.get("/v1/files/content", params={"path": name, "download": "1"})
        assert r.status_code == 200 and r.text == "data\n", (name, r.status_code)
        disposition = r.headers["content-disposition"]
        assert "X-Injected" not in r.headers and all(" " <= ch < "\x7f" for ch in disposition), disposition
        assert disposition.startswith('attachment; filename="') and "filename*=UTF-8''" in disposition


@pytest.mark.parametrize("days", ["9" * 5000, "²", "3²", "9" * 19])
def test_a_number_int_cannot_read_is_a_400_not_a_500(served, days: str) -> None:
    # `isdigit` then `int`: 5000 digits passed `isdigit` and `int` refused them (Python's 4,300-digit limit),
    # as it refuses '²', which `isdigit` takes: a 500 with a traceback in the log
    s, _ = served
    with s.client(ALICE) as c:
        r = c.get("/v1/usage", params={"days": days})
        assert r.status_code == 400 and "days must be a whole number" in r.json()["error"]["message"]
        # an A2A page token that is no offset of ours lists from the start (it was a 500, and -32603 over JSON-RPC)
        r = c.get("/a2a/rest/tasks", params={"pageToken": days}, headers={"A2A-Version": "1.0"})
        assert r.status_code == 200 and r.json()["tasks"] == []
        r = c.post("/a2a/jsonrpc", headers={"A2A-Version": "1.0"}, json={
            "jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageToken": days}})
        assert r.status_code == 200 and "error" not in r.json()


def test_every_number_read_from_a_request_is_read_by_one_check() -> None:
    # what `days`, `after`/Last-Event-ID, an A2A page token and the Content-Length bounds go through: `int`
    # never sees what it would refuse
    from shou.serve.server import too_large, whole_number

    assert [whole_number(raw) for raw in ("0", "42", "9" * 18)] == [0, 42, int("9" * 18)]
    assert [whole_number(raw) for raw in (None, "", "-1", "1.5", "²", "١٢", "9" * 19, "9" * 5000)] == [None] * 8
    assert too_large("9" * 5000, 10) and too_large("11", 10) and not too_large("10", 10)
    assert not any(too_large(raw, 10) for raw in (None, "", "²", "x"))
