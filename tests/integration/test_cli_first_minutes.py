"""What a new user meets in the first minutes: version, sessions to continue and read back, the tool list,
model options on the wire, one tool timeout for every tool, no files made for nothing."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from ..fixtures.needs import need
from .conftest import tool_messages


def calc(expression: str) -> dict:
    return {"tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}]}


def test_version(shou) -> None:
    from importlib.metadata import version

    r = shou("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"shou {version('shou')}"


def test_help_reads_like_help(shou) -> None:
    r = shou("run", "--help")
    assert r.returncode == 0
    assert "TASK" in r.stdout and "{task}" not in r.stdout and "<bool>" not in r.stdout
    assert "--functions FILE" in r.stdout and "list[Path]" not in r.stdout
    assert "<openai|deepseek|qwen|ollama|vllm|llamacpp|custom>" in r.stdout
    assert "<auto|bubblewrap|docker|local>" in r.stdout
    assert "-c, --continue" in r.stdout and "-o, --option KEY VALUE" in r.stdout


def test_summary_names_the_session_and_continue_goes_on_with_it(serve, shou, workspace: Path) -> None:
    srv = serve([{"text": "The code word is heron."}, {"text": "It was heron."}])
    first = shou("run", "Remember heron.", server=srv)
    assert first.returncode == 0, first.stderr
    name = re.search(r"completed · session (\S+) ·", first.stderr)
    assert name, first.stderr
    again = shou("run", "-c", "What was it?", server=srv)
    assert again.returncode == 0, again.stderr
    assert f"session {name.group(1)}" in again.stderr
    sent = [m["content"] for m in srv.requests[1]["messages"] if m["role"] == "user"]
    assert sent == ["Remember heron.", "What was it?"]
    both = shou("run", "-c", "--session", "x", "hi", server=srv)
    assert both.returncode == 2 and "not both" in both.stderr
    assert not (workspace / ".shou" / "memory.db").exists()  # nothing was saved, so no memory file


def test_show_and_sessions_read_back_a_conversation(serve, shou) -> None:
    srv = serve([calc("6*7"), {"text": "It is 42."}])
    assert shou("run", "What is 6*7?", "--session", "s1", server=srv).returncode == 0
    shown = shou("show", "s1")
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "What is 6*7?" in text and 'calculator(expression="6*7")' in text and "← calculator" in text
    assert "42" in text and "completed · 2 steps" in text and "tokens" in text
    data = json.loads(shou("show", "--json").stdout)  # default: the latest session
    assert data["session"] == "s1"
    kinds = [e["type"] for e in data["events"]]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished" and "tool_call_finished" in kinds
    listed = json.loads(shou("sessions", "--json").stdout)
    assert [(s["session"], s["status"], s["runs"]) for s in listed] == [("s1", "completed", 1)]
    missing = shou("show", "nope")
    assert missing.returncode == 2 and "no session 'nope'" in missing.stderr


def test_parallel_results_say_which_call_they_answer(serve, shou) -> None:
    srv = serve([{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}},
                                 {"name": "calculator", "arguments": {"expression": "2*3"}}]}, {"text": "2, 6"}])
    r = shou("run", "two sums", server=srv)
    assert r.returncode == 0, r.stderr
    assert "← calculator #1: 2" in r.stderr and "← calculator #2: 6" in r.stderr


def test_tools_is_a_table_of_whole_sentences(shou) -> None:
    r = shou("tools", COLUMNS="100")
    assert r.returncode == 0
    rows = {line.split()[0]: line for line in r.stdout.splitlines() if line.strip()}
    assert "calculator" in rows and "save_memory" in rows
    assert "…" not in r.stdout


def test_model_options_reach_the_wire(serve, shou, workspace: Path) -> None:
    srv = serve([{"text": "ok"}, {"text": "ok"}, {"text": "ok"}])
    assert shou("run", "-o", "temperature", "0.25", "-o", "seed", "7", "hi", server=srv).returncode == 0
    (workspace / "shou.toml").write_text("temperature = 0.5\nmax_tokens = 64\n")  # both are harmless settings
    assert shou("run", "hi", server=srv).returncode == 0
    assert shou("run", "hi", server=srv, SHOU_TOP_P="0.9", SHOU_TEMPERATURE="0.1").returncode == 0
    first, second, third = srv.requests
    assert (first["temperature"], first["seed"]) == (0.25, 7) and "max_tokens" not in first
    assert (second["temperature"], second["max_tokens"]) == (0.5, 64)
    assert (third["temperature"], third["top_p"], third["max_tokens"]) == (0.1, 0.9, 64)
    bad = shou("run", "-o", "colour", "red", "hi", server=srv)
    assert bad.returncode == 2 and "not a model option" in bad.stderr


def test_any_setting_can_be_given_for_one_run(serve, shou) -> None:
    srv = serve([calc("1+1"), {"text": "2"}])
    r = shou("run", "-o", "token_budget", "5", "add", server=srv)  # a budget, from the command line
    assert r.returncode == 1 and "budget" in r.stderr, r.stderr
    assert len(srv.requests) == 0  # a budget is checked before the call that would break it


def test_every_setting_the_code_reads_can_be_set(shou, workspace: Path) -> None:
    (workspace / "shou.toml").write_text('token_budget = 5000\nbrowser_timeout = 9\nmemory_embeddings = false\n')
    shou("trust", "--yes")
    r = shou("config", SHOU_WEB_ALLOW_HOSTS="10.0.0.0/8", SHOU_WEB_SEARCH_BACKENDS="duckduckgo")
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line for line in r.stdout.splitlines() if line.strip()}
    assert "5000" in rows["token_budget"] and "shou.toml" in rows["token_budget"]
    assert "10.0.0.0/8" in rows["web_allow_hosts"] and "environment" in rows["web_allow_hosts"]
    for name in ("memory_store", "browser_timeout", "web_search_backends", "temperature", "top_p", "seed"):
        assert name in rows


def test_a_tool_timeout_someone_sets_governs_shell_too(serve, shou) -> None:
    from shou.sandbox import diagnose

    need(any(ok for backend, ok, _ in diagnose() if backend == "bubblewrap"), "bubblewrap works here")
    # The command outlasts any machine's slowness (the sandbox's own 300 s would stop it only after the test's
    # timeout), so the run ending soon can only be the 2 s tool_timeout, however busy the machine is.
    srv = serve([{"tool_calls": [{"name": "shell", "arguments": {"command": "sleep 100; echo late"}}]},
                 {"text": "it was stopped"}])
    t0 = time.monotonic()
    r = shou("run", "sleep", server=srv, SHOU_TOOL_TIMEOUT="2")
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    [result] = tool_messages(srv.requests[1])
    assert "late" not in result["content"] and took < 60, (took, result["content"])


def test_a_tool_that_needs_approval_is_refused_not_run(serve, shou, workspace: Path) -> None:
    (workspace / "danger.py").write_text(
        "from pathlib import Path\nfrom shou import tool\n\n"
        "@tool(requires_approval=True)\ndef wipe() -> str:\n    \"\"\"Wipe.\"\"\"\n"
        "    Path('wiped').write_text('yes')\n    return 'wiped'\n")
    srv = serve([{"tool_calls": [{"name": "wipe", "arguments": {}}]}, {"text": "not allowed"}])
    r = shou("run", "wipe", "--functions", "danger.py", server=srv)
    assert r.returncode == 0, r.stderr
    [result] = tool_messages(srv.requests[1])
    assert "denied by policy" in result["content"] and "no one could be asked" in result["content"]
    assert not (workspace / "wiped").exists()
