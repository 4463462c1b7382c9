"""A session's taint outlives its process: a page one `shou run --code -s S` fetched and wrote to the
workspace is still marked when a later run of the same session, in a new process, prints it (issue 28
red team: the taint was an in-memory set)."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..fixtures.hostile_page import INJECTED, serving_hostile_page
from .conftest import tool_messages
from .test_code_taint import _python, assert_marked


@pytest.fixture
def hostile_page() -> Iterator[str]:
    with serving_hostile_page() as url:
        yield url


def test_a_later_process_of_the_session_still_marks_what_was_fetched(serve, shou, hostile_page: str,
                                                                     workspace: Path) -> None:
    srv = serve([
        _python(f"p = web_fetch(url={hostile_page!r})\nopen('page.txt', 'w').write(p)\nprint('saved')"),
        {"text": "Saved."},
        _python("print(open('page.txt').read())"),
        {"text": "Done."},
    ])
    for task in ("save the otter page", "show page.txt"):
        r = shou("run", "--code", "--json", "-s", "S", task, server=srv, timeout=120,
                 SHOU_WEB_ALLOW_HOSTS="127.0.0.1")
        assert r.returncode == 0, r.stderr
    later = tool_messages(srv.requests[3])[-1]["content"]
    assert INJECTED in later
    assert_marked(later, "python")
    marks = list((workspace / ".shou" / "taint").iterdir())
    assert len(marks) == 1 and stat.S_IMODE(marks[0].stat().st_mode) == 0o600


def test_another_session_is_not_marked(serve, shou, hostile_page: str, workspace: Path) -> None:
    srv = serve([
        _python(f"p = web_fetch(url={hostile_page!r})\nprint('fetched')"), {"text": "ok"},
        _python("print('hello from B')"), {"text": "ok"},
    ])
    for name in ("A", "B"):
        r = shou("run", "--code", "--json", "-s", name, "go", server=srv, timeout=120, SHOU_WEB_ALLOW_HOSTS="127.0.0.1")
        assert r.returncode == 0, r.stderr
    assert "untrusted-content" not in tool_messages(srv.requests[3])[-1]["content"]
