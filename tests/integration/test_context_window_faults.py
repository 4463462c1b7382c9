"""Faults at the edges of the context window, through `shou run`: a task that nearly fills the window, and
results that each fill most of a small one. The scripted model checks (with `expect`) that it can still see
the record of the side effect it caused and the fact an early result held; a model that cannot does it again
(`otherwise`), so the side effect is counted in the workspace."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

from shou.context.tokens import TokenCounter
from shou.context.validate import validate_messages
from shou.messages import Message

from ..fixtures.count_tools import append_line
from .conftest import FIXTURES, shou_env

COUNTER = TokenCounter("scripted-test")
APPEND = {"tool_calls": [{"name": "append_line", "arguments": {"text": "done"}}]}
SEEN_APPEND = r"append_line\(.*\).*\n?.*count\.txt now has 1 line|count\.txt now has 1 line"


def filler(tokens: int, seed: int) -> str:
    """Words that cost about `tokens` tokens and match no pattern a script looks for."""
    rng = random.Random(seed)
    words = []
    while len(words) < tokens * 3 // 4:
        words.append(rng.choice(["amber", "basalt", "cobalt", "delta", "ember", "fjord", "granite", "harbor"])
                     + str(rng.randint(0, 999)))
    text = " ".join(words)
    while COUNTER.text(text) > tokens:
        text = text[: int(len(text) * 0.97)]
    return text


def run(tmp_path: Path, workspace: Path, srv, task: str, *args: str) -> subprocess.CompletedProcess[str]:
    tools = FIXTURES / "count_tools.py"
    env = shou_env(tmp_path, srv)
    # CONTEXT_TEST_SHOU=/path/to/other/src runs another shou against this scripted server (the old one, to
    # see these faults happen: the script's `expect` is newer than that shou).
    if os.environ.get("CONTEXT_TEST_SHOU"):
        env["PYTHONPATH"] = os.environ["CONTEXT_TEST_SHOU"]
    return subprocess.run(
        [sys.executable, "-m", "shou", "run", "-", "--json", "--functions", str(tools), *args], cwd=workspace,
        env=env, input=task, capture_output=True, text=True, timeout=300)


def check_requests(requests: list[dict], window: int) -> list[dict]:
    """The run's own requests (not compaction's), each valid and within the window."""
    normal = [r for r in requests if "[shou:compact]" not in str(r["messages"][0]["content"])]
    for body in normal:
        messages = [Message.from_wire(m) for m in body["messages"]]
        validate_messages(messages)
        assert COUNTER.messages(messages) + COUNTER.text(json.dumps(body.get("tools"))) <= window
    return normal


def finished(stdout: str) -> dict:
    return [json.loads(x) for x in stdout.splitlines() if x.startswith("{")][-1]


def test_a_task_near_the_window_keeps_the_record_of_the_side_effect(serve, tmp_path: Path, workspace: Path) -> None:
    # ~28k tokens against the 32,768 shou assumes for a model it does not know.
    task = "Append the line 'done' to count.txt once, then do a few sums, then say you are done.\n" + \
        filler(28_000, 1)
    turns = [APPEND] + [{"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} + {i}"}}]}
                        for i in range(1, 5)]
    turns.append({"expect": [SEEN_APPEND], "text": "Appended once; all done.", "otherwise": APPEND})
    turns += [{"summary": True, "text": "Summary: the user gave a long task; work is under way."}] * 10
    srv = serve(turns)
    r = run(tmp_path, workspace, srv, task)
    assert r.returncode == 0, r.stderr
    end = finished(r.stdout)
    assert end["status"] == "completed", end
    assert (workspace / "count.txt").read_text() == "done\n"  # the side effect happened once
    normal = check_requests(srv.requests, 32_768)
    assert len(normal) == 6  # append, four sums, the answer: nothing done twice
    last = normal[-1]["messages"]
    assert any(m["role"] == "tool" and "count.txt now has 1 line" in m["content"] for m in last)
    # The task did not fit whole: it was shortened into a file the model can read, and the file holds it all.
    [spilled] = (workspace / ".shou" / "outputs").glob("task-*")
    assert spilled.read_text() == task
    assert last[1]["role"] == "user" and str(spilled.relative_to(workspace)) in last[1]["content"]
    assert last[1]["content"].startswith("Append the line 'done'")  # the head of the task is still there


def test_results_that_fill_a_small_window_stay_reachable(serve, tmp_path: Path, workspace: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "shou.toml").write_text('[models."scripted-test"]\ncontext_window = 8192\n')
    fact = "the vault code is 7341"
    for i in range(1, 9):  # ~3,760 tokens each: under the spill size, most of the window each
        body = filler(3_740, 10 + i)
        (workspace / f"f{i}.txt").write_text(f"{fact}.\n{body}\n" if i == 1 else body + "\n")
    assert 3_600 < COUNTER.text((workspace / "f1.txt").read_text()) < 3_800
    turns = [APPEND] + [{"tool_calls": [{"name": "read_file", "arguments": {"path": f"f{i}.txt"}}]}
                        for i in range(1, 9)]
    turns.append({"expect": [SEEN_APPEND, fact], "text": "The vault code is 7341.", "otherwise": APPEND})
    # The summaries keep neither the fact nor the append: what the model gets back must come from shou.
    turns += [{"summary": True, "text": "Summary: files are being read one by one."}] * 20
    srv = serve(turns)
    r = run(tmp_path, workspace, srv, "Append 'done' to count.txt, read f1.txt to f8.txt, then tell me the "
            "vault code.")
    assert r.returncode == 0, r.stderr
    end = finished(r.stdout)
    assert end["status"] == "completed", end
    assert "7341" in end["answer"]
    assert (workspace / "count.txt").read_text() == "done\n"
    normal = check_requests(srv.requests, 8192)
    assert len(normal) == 10
    assert any("[shou:compact]" in str(r["messages"][0]["content"]) for r in srv.requests)  # compaction ran
    last = json.dumps(normal[-1]["messages"])
    assert "Not shown in this request" in last and ".shou/outputs/read_file-" in last


def test_through_the_library_nothing_is_dropped_unsaid(serve, workspace: Path) -> None:
    """The same 8k-window case with the window given in Python, over the real HTTP client: every request the
    model gets after the reads still holds the append's record and the early fact (no `expect` here: what
    was sent is checked afterwards)."""
    from shou import Agent
    from shou.context.builder import ContextPolicy
    from shou.models.openai_compat import OpenAICompatible
    from shou.tools.builtin.files import read_file

    fact = "the vault code is 7341"
    for i in range(1, 9):
        body = filler(3_740, 10 + i)
        (workspace / f"f{i}.txt").write_text(f"{fact}.\n{body}\n" if i == 1 else body + "\n")
    turns = [APPEND] + [{"tool_calls": [{"name": "read_file", "arguments": {"path": f"f{i}.txt"}}]}
                        for i in range(1, 9)] + [{"text": "The vault code is 7341."}]
    turns += [{"summary": True, "text": "Summary: files are being read one by one."}] * 20
    srv = serve(turns)
    agent = Agent(OpenAICompatible("m", base_url=srv.base_url), [append_line, read_file], workspace=workspace,
                  context=ContextPolicy(window=8192))
    result = agent.run("Append 'done' to count.txt, read f1.txt to f8.txt, then tell me the vault code.")
    assert result.status == "completed", result.error
    normal = check_requests(srv.requests, 8192)
    for body in normal[2:]:
        text = json.dumps(body["messages"])
        assert "count.txt now has 1 line" in text  # the side effect's record is in every request
    last = "\n".join(str(m["content"]) for m in normal[-1]["messages"])
    assert fact in last or any(fact in (workspace / p).read_text()
                               for p in re.findall(r"\.shou/outputs/read_file-\w+\.txt", last))


def test_a_big_system_prompt_counts_towards_compaction(serve, workspace: Path) -> None:
    """Instructions of half the window: the trigger must count them, or older turns are dropped with
    compaction never starting."""
    from shou import Agent
    from shou.context.builder import ContextPolicy
    from shou.models.openai_compat import OpenAICompatible
    from shou.tools.builtin.files import read_file

    for i in range(1, 7):
        (workspace / f"f{i}.txt").write_text(filler(700, 40 + i) + "\n")
    turns = [{"tool_calls": [{"name": "read_file", "arguments": {"path": f"f{i}.txt"}}]} for i in range(1, 7)]
    turns += [{"text": "done"}] + [{"summary": True, "text": "Summary: read f1 to f5."}] * 10
    srv = serve(turns)
    agent = Agent(OpenAICompatible("m", base_url=srv.base_url), [read_file], filler(4_000, 99),
                  workspace=workspace, context=ContextPolicy(window=8192, reserve_output=500))
    result = agent.run("Read f1.txt to f6.txt.")
    assert result.status == "completed", result.error
    check_requests(srv.requests, 8192)
    assert any("[shou:compact]" in str(r["messages"][0]["content"]) for r in srv.requests)
