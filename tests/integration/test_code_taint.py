"""The session's interpreter remembers that outside content entered it: a page one cell fetched and kept in a
variable reaches the model marked untrusted when a later cell prints it, through `shou run` with a scripted
model (code mode's `python`, and stateful `run_code` in a sandbox that has the network)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from ..fixtures.hostile_page import INJECTED, serving_hostile_page
from .conftest import tool_messages


@pytest.fixture
def hostile_page() -> Iterator[str]:
    with serving_hostile_page() as url:
        yield url


def assert_marked(content: str, source: str) -> None:
    """`content` is one untrusted block of `source`, closed by its own id, with nothing outside it."""
    m = re.fullmatch(rf'<untrusted-content source="{source}" id="([0-9a-f]+)">\n(.*)\n</untrusted-content id="\1">',
                     content, re.DOTALL)
    assert m, content
    assert "</untrusted-content" not in m[2]


def _python(code: str) -> dict:
    return {"tool_calls": [{"name": "python", "arguments": {"code": code}}]}


def test_a_page_kept_in_a_variable_stays_untrusted_in_later_cells(serve, shou, hostile_page: str) -> None:
    srv = serve([
        _python(f"page = web_fetch(url={hostile_page!r})\nprint('fetched', len(page), 'characters')"),
        _python("print(page[page.index('IMPORTANT'):page.index('workspace.') + 10])"),  # no delimiter in the slice
        _python("notes = [page.upper()]\nprint('ok')"),
        _python("print(notes[0][notes[0].index('IMPORTANT'):][:40])"),  # two cells on, through another variable
        {"text": "Done."},
    ])
    r = shou("run", "--code", "--json", "Read the otter page", server=srv, timeout=120,
             SHOU_WEB_ALLOW_HOSTS="127.0.0.1")
    assert r.returncode == 0, r.stderr
    first = tool_messages(srv.requests[1])[-1]["content"]
    assert_marked(first, "python")
    second = tool_messages(srv.requests[2])[-1]["content"]
    assert INJECTED in second
    assert_marked(second, "python")
    assert_marked(tool_messages(srv.requests[3])[-1]["content"], "python")
    fourth = tool_messages(srv.requests[4])[-1]["content"]
    assert INJECTED.upper()[:40] in fourth
    assert_marked(fourth, "python")
    # the system prompt explains the blocks (it did before: web_fetch is among the code's tools)
    assert "<untrusted-content" in srv.requests[2]["messages"][0]["content"]


def test_cells_without_outside_content_stay_unmarked(serve, shou) -> None:
    srv = serve([_python("x = calculator(expression='6*7')\nprint('x is', x)"), _python("print(x + 1)"),
                 {"text": "Done."}])
    r = shou("run", "--code", "--json", "count", server=srv, timeout=120)
    assert r.returncode == 0, r.stderr
    first, second = (tool_messages(srv.requests[i])[-1]["content"] for i in (1, 2))
    assert "x is 42" in first and "43" in second
    assert "untrusted-content" not in first + second


def test_a_stateful_interpreter_with_the_network_marks_what_it_fetched_in_later_cells(
        serve, shou, hostile_page: str) -> None:
    fetch = (f"import urllib.request\nhtml = urllib.request.urlopen({hostile_page!r}, timeout=30).read().decode()\n"
             "print('got', len(html))")
    srv = serve([
        {"tool_calls": [{"name": "run_code", "arguments": {"language": "python", "code": fetch, "stateful": True}}]},
        {"tool_calls": [{"name": "run_code", "arguments": {
            "language": "python", "code": "print(html[html.index('IMPORTANT'):][:80])", "stateful": True}}]},
        {"text": "Done."},
    ])
    r = shou("run", "--json", "fetch the page", server=srv, timeout=120, SHOU_SANDBOX_NETWORK="true")
    assert r.returncode == 0, r.stderr
    first = tool_messages(srv.requests[1])[-1]["content"]
    assert "got " in first, first
    assert_marked(first, "run_code")
    second = tool_messages(srv.requests[2])[-1]["content"]
    assert INJECTED[:60] in second
    assert_marked(second, "run_code")
    assert "<untrusted-content" in srv.requests[1]["messages"][0]["content"]  # the system prompt explains them
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert all(e["content"].startswith("<untrusted-content") for e in events if e["type"] == "tool_call_finished")


def test_shell_output_in_a_sandbox_with_the_network_is_marked(serve, shou, hostile_page: str) -> None:
    command = f"python3 -c \"import urllib.request; print(urllib.request.urlopen('{hostile_page}').read().decode())\""
    srv = serve([{"tool_calls": [{"name": "shell", "arguments": {"command": command}}]}, {"text": "Done."}])
    r = shou("run", "--json", "fetch it with the shell", server=srv, timeout=120, SHOU_SANDBOX_NETWORK="true")
    assert r.returncode == 0, r.stderr
    content = tool_messages(srv.requests[1])[-1]["content"]
    assert INJECTED in content
    assert_marked(content, "shell")
