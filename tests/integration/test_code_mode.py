"""Code as action through `shou run --code`: one python action calls several tools, in the sandbox."""

from __future__ import annotations

import json
from pathlib import Path


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


CODE = """
zone = current_time(timezone="UTC")
total = calculator(expression="6*7")
for i in range(3):
    write_file(path=f"part{i}.txt", content=str(total + i))
print("total", total, "utc" in str(zone).lower())
sorted(p for p in list_files(pattern="part*.txt").split() if p.startswith("part"))
"""


def test_one_python_action_calls_two_tools_and_a_loop_over_a_third(serve, shou, workspace: Path) -> None:
    srv = serve([{"tool_calls": [{"name": "python", "arguments": {"code": CODE}}]}, {"text": "Done."}])
    r = shou("run", "--code", "--json", "Write the parts", server=srv)
    assert r.returncode == 0, r.stderr
    assert [(workspace / f"part{i}.txt").read_text() for i in range(3)] == ["42", "43", "44"]
    events = _events(r.stdout)
    # the model is offered python alone, its description the tools as Python functions
    [offered] = srv.requests[0]["tools"]
    assert offered["function"]["name"] == "python"
    assert "def calculator(expression: str) -> Any:" in offered["function"]["description"]
    assert "def write_file(path: str, content: str) -> Any:" in offered["function"]["description"]
    # every call the code made is a tool event of its own, with its result, under the run
    run_id = events[0]["run_id"]
    inner = [e for e in events if e["type"] == "tool_call_finished" and e.get("parent") == run_id]
    assert [e["name"] for e in inner] == ["current_time", "calculator", "write_file", "write_file", "write_file",
                                          "list_files"]
    assert inner[1]["content"] == "42" and not any(e["is_error"] for e in inner)
    [outer] = [e for e in events if e["type"] == "tool_call_finished" and not e.get("parent")]
    assert outer["name"] == "python" and "total 42 True" in outer["content"]
    assert "['part0.txt', 'part1.txt', 'part2.txt']" in outer["content"]  # the last expression's value
    # the conversation holds the python call and its result only
    assert [m["role"] for m in srv.requests[1]["messages"]] == ["system", "user", "assistant", "tool"]


def test_a_refused_call_raises_in_the_code(serve, shou, workspace: Path) -> None:
    code = ("try:\n    write_file(path='x.txt', content='no')\nexcept ToolError as e:\n    print('refused:', e)\n"
            "calculator(expression='1+1')")
    srv = serve([{"tool_calls": [{"name": "python", "arguments": {"code": code}}]}, {"text": "ok"}])
    r = shou("run", "--code", "--json", "try it", server=srv, SHOU_PERMISSIONS_DENY="write_file")
    assert r.returncode == 0, r.stderr
    assert not (workspace / "x.txt").exists()
    [outer] = [e for e in _events(r.stdout) if e["type"] == "tool_call_finished" and not e.get("parent")]
    assert "refused:" in outer["content"] and "deny" in outer["content"].lower()
    assert outer["content"].rstrip().endswith("2")


def test_the_code_cannot_reach_the_network(serve, shou, loopback_page: str) -> None:
    code = (f"import urllib.request\ntry:\n    print(urllib.request.urlopen({loopback_page!r}, timeout=3).read())\n"
            "except Exception as e:\n    print('blocked:', type(e).__name__)\n")
    srv = serve([{"tool_calls": [{"name": "python", "arguments": {"code": code}}]}, {"text": "ok"}])
    r = shou("run", "--code", "--json", "reach out", server=srv)
    assert r.returncode == 0, r.stderr
    [outer] = [e for e in _events(r.stdout) if e["type"] == "tool_call_finished" and not e.get("parent")]
    assert "blocked:" in outer["content"] and "forty-two" not in outer["content"]


def test_code_calls_mcp_tools_and_their_output_stays_marked(serve, shou) -> None:
    import sys

    servers = {"time": {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}}
    code = "now = time__get_current_time(timezone='UTC')\nprint(type(now).__name__, now['timezone'])"
    srv = serve([{"tool_calls": [{"name": "python", "arguments": {"code": code}}]}, {"text": "ok"}])
    r = shou("run", "--code", "--json", "what time", server=srv, timeout=120, SHOU_MCP_SERVERS=json.dumps(servers))
    assert r.returncode == 0, r.stderr
    assert "def time__get_current_time(timezone: str) -> Any:" in srv.requests[0]["tools"][0]["function"]["description"]
    [outer] = [e for e in _events(r.stdout) if e["type"] == "tool_call_finished" and not e.get("parent")]
    assert "dict UTC" in outer["content"]  # the server's structured content, as a dict
    assert outer["content"].lstrip().startswith("<untrusted-content")  # it came from outside


def test_code_that_writes_on_the_pipe_itself_gets_an_answer_not_a_crash(serve, shou) -> None:
    # the tool functions' pipe is reachable from the code: forged requests must be answered like calls
    code = ("import json\ncells = [c.cell_contents for c in calculator.__closure__]\n"
            "w = next(c for c in cells if getattr(c, 'mode', '') == 'w')\n"
            "r = next(c for c in cells if getattr(c, 'mode', '') == 'r')\n"
            "w.write(json.dumps({'call': 'not a call'}) + '\\n'); w.flush(); print(r.readline().strip())\n"
            "w.write(json.dumps({'call': {'name': 'shell', 'arguments': {'command': 'id'}}}) + '\\n'); w.flush()\n"
            "print(r.readline().strip())\ncalculator(expression='2*3')")
    srv = serve([{"tool_calls": [{"name": "python", "arguments": {"code": code}}]}, {"text": "ok"}])
    r = shou("run", "--code", "--json", "poke", server=srv, SHOU_PERMISSIONS_DENY="shell")
    assert r.returncode == 0, r.stderr
    events = _events(r.stdout)
    [outer] = [e for e in events if e["type"] == "tool_call_finished" and not e.get("parent")]
    assert "must name the tool" in outer["content"] and outer["content"].rstrip().endswith("6")
    [shell] = [e for e in events if e["type"] == "tool_call_finished" and e.get("parent") and e["name"] == "shell"]
    assert shell["is_error"]  # the policy still decides a forged call
