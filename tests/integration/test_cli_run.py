"""`shou run` as a subprocess against the scripted model served over loopback HTTP."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..fixtures.procs import gone_within
from .conftest import FIXTURES, tool_messages


def calc(expression: str, **kw: object) -> dict:
    return {"tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}], **kw}


def events_of(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_calculator_task(serve, shou) -> None:
    srv = serve([calc("123 * 45"), {"text": "123 * 45 = 5535"}])
    r = shou("run", "What is 123 * 45?", server=srv)
    assert r.returncode == 0, r.stderr
    assert "5535" in r.stdout
    assert "→ calculator(expression=\"123 * 45\")" in r.stderr
    assert "completed · session " in r.stderr and " · 2 steps · " in r.stderr
    first, second = srv.requests
    assert first["model"] == "scripted-test" and first["stream"] is True
    assert first["stream_options"] == {"include_usage": True}
    assert first["messages"][-1] == {"role": "user", "content": "What is 123 * 45?"}
    assert {t["function"]["name"] for t in first["tools"]} >= {"calculator", "read_file", "current_time"}
    [result] = tool_messages(second)
    assert result["content"] == "5535"  # the real calculator ran; the script never says 5535 to it


def test_read_then_write_markdown(serve, shou, workspace: Path) -> None:
    (workspace / "a.txt").write_text("Shopping\nmilk\neggs\n")
    markdown = "# Shopping\n\n- milk\n- eggs\n"
    srv = serve([
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "b.md", "content": markdown}}]},
        {"text": "Saved b.md."},
    ])
    r = shou("run", "turn a.txt into markdown and save it as b.md", server=srv)
    assert r.returncode == 0, r.stderr
    assert (workspace / "b.md").read_text() == markdown
    assert "milk" in tool_messages(srv.requests[1])[0]["content"]
    assert "b.md" in tool_messages(srv.requests[2])[-1]["content"]


def test_unknown_tool_gets_the_list_and_the_run_recovers(serve, shou) -> None:
    srv = serve([
        {"tool_calls": [{"name": "multiply", "arguments": {"a": 123, "b": 45}}]},
        calc("123*45"),
        {"text": "5535"},
    ])
    r = shou("run", "What is 123 * 45?", server=srv)
    assert r.returncode == 0, r.stderr
    error = tool_messages(srv.requests[1])[0]["content"]
    assert "no tool named 'multiply'" in error and "calculator" in error and "read_file" in error


def test_malformed_json_repaired_and_unrepairable(serve, shou) -> None:
    srv = serve([
        {"tool_calls": [{"name": "calculator", "arguments": "{'expression': '2 + 2'"}]},  # repairable
        {"tool_calls": [{"name": "calculator", "arguments": "please compute two plus two"}]},  # not JSON at all
        calc("2 + 2"),
        {"text": "4"},
    ])
    r = shou("run", "2 + 2?", server=srv)
    assert r.returncode == 0, r.stderr
    assert tool_messages(srv.requests[1])[0]["content"] == "4"
    bad = tool_messages(srv.requests[2])[-1]
    assert "not valid JSON" in bad["content"] and "could not be repaired" in bad["content"]
    assert tool_messages(srv.requests[3])[-1]["content"] == "4"  # recovered on the next turn


def test_schema_violation(serve, shou) -> None:
    srv = serve([
        {"tool_calls": [{"name": "calculator", "arguments": {"expr": "1 + 1"}}]},
        calc("1 + 1"),
        {"text": "2"},
    ])
    r = shou("run", "1 + 1?", server=srv)
    assert r.returncode == 0, r.stderr
    error = tool_messages(srv.requests[1])[0]["content"]
    assert "expression: Field required" in error and "expr: unexpected argument" in error


def test_hanging_tool_times_out_and_the_run_goes_on(serve, shou, workspace: Path) -> None:
    srv = serve([{"tool_calls": [{"name": "wait_forever", "arguments": {}}]}, {"text": "It hung; giving up on it."}])
    t0 = time.monotonic()
    r = shou("run", "wait", "--functions", str(FIXTURES / "extra_tools.py"), server=srv, timeout=100)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 90  # the tool waits on a 600 s sleep: only its 1 s timeout ends it this soon
    assert "did not finish within 1 s" in tool_messages(srv.requests[1])[0]["content"]
    pid = int((workspace / "hang.pid").read_text())
    assert gone_within(pid), f"the tool's child process {pid} outlived the timeout"


def test_repeated_identical_calls_stop_the_run_as_a_loop(serve, shou) -> None:
    srv = serve([calc("1+1"), calc("1+1"), calc("1+1"), calc("1+1"), {"text": "never reached"}])
    r = shou("run", "1+1", "--json", server=srv)
    assert r.returncode == 1
    events = events_of(r.stdout)
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "loop"
    assert len(srv.requests) == 4
    third = tool_messages(srv.requests[3])[-1]["content"]
    assert third.startswith("2") and "change your approach" in third  # the note came with the 3rd result
    assert sum(e["type"] == "tool_call_finished" and not e["is_error"] for e in events) == 3  # 4th never ran


def test_streamed_arguments_in_many_fragments(serve, shou) -> None:
    expression = "(17 + 25) * 3 - 12 / 4"
    srv = serve([calc(expression, chunk_size=2), {"text": "123", "chunk_size": 1}])
    r = shou("run", "compute", "--json", server=srv)
    assert r.returncode == 0, r.stderr
    events = events_of(r.stdout)
    deltas = [e for e in events if e["type"] == "tool_call_delta"]
    assert len(deltas) > 10
    assert "".join(d["arguments"] for d in deltas) == json.dumps({"expression": expression})
    assert tool_messages(srv.requests[1])[0]["content"] == "123.0"
    assert [e["text"] for e in events if e["type"] == "text_delta"] == ["1", "2", "3"]


def test_429_with_retry_after_then_success(serve, shou) -> None:
    srv = serve([{"error": 429, "retry_after": 1, "message": "slow down"}, {"text": "fine now"}])
    t0 = time.monotonic()
    r = shou("run", "hello", server=srv)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 >= 1.0  # Retry-After was honoured
    assert "retry 1 in 1.0 s" in r.stderr and "fine now" in r.stdout
    assert len(srv.requests) == 2


def test_401_is_a_clear_error_without_traceback(serve, shou) -> None:
    srv = serve([{"error": 401, "message": "Incorrect API key provided"}])
    r = shou("run", "hello", server=srv)
    assert r.returncode == 1
    assert "refused the API key" in r.stderr and "SHOU_API_KEY" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert len(srv.requests) == 1  # auth errors are not retried


def test_no_model_configured_explains_in_one_paragraph(shou) -> None:
    r = shou("run", "hello", SHOU_OFFLINE_FALLBACK="0")  # without it, the bundled offline model would answer
    assert r.returncode == 2
    assert "No model is configured" in r.stderr and "OPENAI_API_KEY" in r.stderr
    assert "Traceback" not in r.stderr


def test_tools_flag_narrows_the_offer(serve, shou) -> None:
    srv = serve([{"text": "ok"}])
    r = shou("run", "hi", "--tools", "calculator,current_time", server=srv)
    assert r.returncode == 0, r.stderr
    assert [t["function"]["name"] for t in srv.requests[0]["tools"]] == ["calculator", "current_time"]
    r = shou("run", "hi", "--tools", "calculator,teleport", server=srv)
    assert r.returncode == 2 and "teleport" in r.stderr and "available" in r.stderr


def test_session_continued_in_a_second_process(serve, shou) -> None:
    srv = serve([{"text": "Noted: the code word is heron."}, {"text": "The code word is heron."}])
    assert shou("run", "Remember the code word heron.", "--session", "s1", server=srv).returncode == 0
    r = shou("run", "What was the code word?", "--session", "s1", server=srv)
    assert r.returncode == 0, r.stderr
    sent = [(m["role"], m["content"]) for m in srv.requests[1]["messages"] if m["role"] != "system"]
    assert sent == [("user", "Remember the code word heron."), ("assistant", "Noted: the code word is heron."),
                    ("user", "What was the code word?")]
    listing = shou("sessions")
    assert "s1" in listing.stdout and "Remember the code word" in listing.stdout


def test_config_masks_the_key(shou) -> None:
    r = shou("config", SHOU_API_KEY="sk-supersecret-abcd", SHOU_MODEL="deepseek:deepseek-chat")
    assert r.returncode == 0, r.stderr
    assert "supersecret" not in r.stdout and "sk-…abcd" in r.stdout
    assert "deepseek:deepseek-chat at https://api.deepseek.com/v1" in r.stdout


def test_a_key_in_the_base_url_s_path_is_not_in_the_output_nor_the_session_log(shou, workspace: Path) -> None:
    # the "cannot reach" error quoted the base URL whole: a gateway key in its path or fragment went to --json
    # output and .shou/shou.db
    key, frag = "sk-proj-SECRETPATHabcdef1234567890ABCDEF", "SECRETFRAGabc123"
    r = shou("run", "--json", "hi", SHOU_BASE_URL=f"http://127.0.0.1:9/v1/{key}/#{frag}", SHOU_MODEL="m",
             SHOU_API_KEY="test-key", timeout=120)
    assert "cannot reach" in r.stdout + r.stderr, r.stdout + r.stderr
    assert "SECRET" not in r.stdout + r.stderr
    for db in (workspace / ".shou").glob("*.db*"):
        assert b"SECRETPATH" not in db.read_bytes() and b"SECRETFRAG" not in db.read_bytes(), db
