"""`shou serve` keeps a session's interpreter between runs: a page a code-mode run kept in a variable is still
marked untrusted when a later run of the session prints it with stateful `run_code`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..fixtures.hostile_page import INJECTED, serving_hostile_page
from ..fixtures.serving import Served, start_serve, stream_run
from .conftest import shou_env
from .test_code_taint import assert_marked

TOKEN = "taint-token-0123456789"


@pytest.fixture
def hostile_page() -> Iterator[str]:
    with serving_hostile_page() as url:
        yield url


def test_a_later_run_of_the_session_prints_the_page_marked(serve, tmp_path: Path, workspace: Path,
                                                           hostile_page: str) -> None:
    srv = serve([
        {"tool_calls": [{"name": "python", "arguments": {"code": f"page = web_fetch(url={hostile_page!r})"}}]},
        {"text": "Fetched."},
        {"tool_calls": [{"name": "run_code", "arguments": {
            "language": "python", "stateful": True, "code": "print(page[page.index('IMPORTANT'):][:80])"}}]},
        {"text": "Printed."},
    ])
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"{TOKEN} alice\n")
    tokens.chmod(0o600)  # a tokens file must be its owner's alone
    served: Served = start_serve(workspace, shou_env(tmp_path, srv, SHOU_WEB_ALLOW_HOSTS="127.0.0.1"),
                                 "--tokens", str(tokens))
    try:
        with served.client(TOKEN, timeout=120) as c:
            first = c.post("/v1/runs", json={"task": "fetch", "session": "s1", "options": {"code": True}})
            assert first.status_code == 202, first.text
            assert stream_run(c, first.json()["run_id"])[-1]["data"]["status"] == "completed"
            second = c.post("/v1/runs", json={"task": "print it", "session": "s1"})
            assert second.status_code == 202, second.text
            events = stream_run(c, second.json()["run_id"])
    finally:
        served.stop()
    assert events[-1]["data"]["status"] == "completed", events[-1]
    [printed] = [m["data"] for m in events if m["event"] == "tool_call_finished"]
    assert printed["name"] == "run_code" and INJECTED[:60] in printed["content"]
    assert_marked(printed["content"], "run_code")
