"""Plan and execute, and reflection, through `shou run` with a scripted model over HTTP."""

from __future__ import annotations

import json
import time
from pathlib import Path

from .conftest import FIXTURES


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def verdict(done: bool, reason: str = "it did what it was for") -> dict:
    """A plan step's verdict, which the step's model is asked for once the step's run completes."""
    return {"tool_calls": [{"name": "step_verdict", "arguments": {"done": done, "reason": reason}}]}


PLAN_SCRIPT = [
    # the plan: two steps
    {"tool_calls": [{"name": "submit_plan", "arguments": {"steps": ["Write the intro to notes.txt",
                                                                    "Fetch the report data"]}}]},
    # step 1: writes a file, then reports
    {"tool_calls": [{"name": "write_file", "arguments": {"path": "notes.txt", "content": "intro\n"}}]},
    {"text": "Wrote the intro to notes.txt."},
    verdict(True),
    # step 2: the fetch hangs past plan_step_timeout
    {"tool_calls": [{"name": "fetch_report", "arguments": {}}]},
    # the re-plan: a new step for what remains
    {"tool_calls": [{"name": "submit_plan", "arguments": {"steps": ["Write report.txt from the cached figures"]}}]},
    {"tool_calls": [{"name": "write_file", "arguments": {"path": "report.txt", "content": "figures: 42\n"}}]},
    {"text": "Wrote report.txt with the cached figures."},
    verdict(True),
    # the final answer, from the steps' results
    {"text": "Done: notes.txt has the intro and report.txt the figures (42)."},
]


def test_a_hanging_step_is_replanned_and_the_run_completes(serve, shou, workspace: Path) -> None:
    srv = serve(PLAN_SCRIPT)
    t0 = time.monotonic()
    r = shou("run", "--plan", "--json", "Write the notes and the report", "--functions",
             str(FIXTURES / "extra_tools.py"), server=srv, SHOU_PLAN_STEP_TIMEOUT="1.5", timeout=100)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 90  # the step's tool sleeps 300 s: only the 1.5 s step timeout ends it this soon
    assert (workspace / "report.txt").read_text() == "figures: 42\n"
    assert (workspace / "notes.txt").read_text() == "intro\n"
    events = _events(r.stdout)
    plans = [e for e in events if e["type"] == "plan"]
    assert {p["revision"] for p in plans} == {1, 2}
    first = [p for p in plans if p["revision"] == 1]
    assert [s["status"] for s in first[0]["steps"]] == ["pending", "pending"]
    failed = [p for p in first if p["steps"][1]["status"] == "failed"]
    assert failed and "timeout" in failed[0]["note"]
    last = plans[-1]
    assert last["revision"] == 2
    assert [s["status"] for s in last["steps"]] == ["done", "failed", "done"]
    assert last["steps"][2]["text"] == "Write report.txt from the cached figures"
    done = events[-1]
    assert done["type"] == "run_finished" and done["status"] == "completed"
    assert done["answer"].startswith("Done: notes.txt")
    # each step ran with a fresh context: the plan and earlier results, not the planner's conversation
    step2 = srv.requests[4]["messages"]
    assert "Wrote the intro to notes.txt." in step2[-1]["content"] and "Do this step only" in step2[-1]["content"]
    replan = srv.requests[5]
    assert replan["tools"][0]["function"]["name"] == "submit_plan" and len(replan["tools"]) == 1
    assert "failed" in replan["messages"][-1]["content"] and "timeout" in replan["messages"][-1]["content"]
    final = srv.requests[9]
    assert "tools" not in final and "figures" in final["messages"][-1]["content"]
    # the sub-runs' events stream with their parent's run id
    run_id = events[0]["run_id"]
    subs = [e for e in events if e.get("parent")]
    assert subs and all(e["parent"] == run_id for e in subs)
    assert any(e["type"] == "tool_call_started" and e["call"]["function"]["name"] == "fetch_report" for e in subs)


def test_the_cli_shows_the_plan_as_a_checklist(serve, shou) -> None:
    srv = serve(PLAN_SCRIPT)
    r = shou("run", "--plan", "Write the notes and the report", "--functions", str(FIXTURES / "extra_tools.py"),
             server=srv, SHOU_PLAN_STEP_TIMEOUT="1.5")
    assert r.returncode == 0, r.stderr
    err = r.stderr
    assert "plan (revision 1)" in err and "plan (revision 2)" in err
    assert "✗ 2. Fetch the report data" in err
    assert "✓ 1. Write the intro to notes.txt" in err and "✓ 3. Write report.txt" in err
    assert r.stdout.strip().startswith("Done: notes.txt")


def test_a_plan_stops_when_no_replan_is_left(serve, shou) -> None:
    srv = serve(PLAN_SCRIPT[:5])
    r = shou("run", "--plan", "--json", "Write the notes and the report", "--functions",
             str(FIXTURES / "extra_tools.py"), server=srv, SHOU_PLAN_STEP_TIMEOUT="1", SHOU_MAX_REPLANS="0")
    assert r.returncode == 1, r.stderr
    done = _events(r.stdout)[-1]
    assert done["status"] == "error" and "max_replans" in done["error"]


FAILED_STEP_SCRIPT = [
    {"tool_calls": [{"name": "submit_plan", "arguments": {"steps": ["Read the figures from figures.txt",
                                                                    "Write report.txt from the figures"]}}]},
    # step 1: its tool fails, and its model says so, in a reply that ends the step's run `completed`
    {"tool_calls": [{"name": "read_file", "arguments": {"path": "figures.txt"}}]},
    {"text": "FAILED: figures.txt does not exist, so I have no figures."},
    verdict(False, "figures.txt could not be read: there are no figures"),
    # the re-plan: get the figures another way
    {"tool_calls": [{"name": "submit_plan", "arguments": {"steps": ["Write figures.txt with the figure 42",
                                                                    "Write report.txt from figures.txt"]}}]},
    {"tool_calls": [{"name": "write_file", "arguments": {"path": "figures.txt", "content": "42\n"}}]},
    {"text": "Wrote figures.txt."},
    verdict(True),
    {"tool_calls": [{"name": "write_file", "arguments": {"path": "report.txt", "content": "figure: 42\n"}}]},
    {"text": "Wrote report.txt."},
    verdict(True),
    {"text": "report.txt has the figure 42."},
]


def test_a_step_whose_tool_failed_and_whose_model_said_failed_is_replanned(serve, shou, workspace: Path) -> None:
    srv = serve(FAILED_STEP_SCRIPT)
    r = shou("run", "--plan", "--json", "Write a report from the figures", server=srv)
    assert r.returncode == 0, r.stderr
    assert (workspace / "report.txt").read_text() == "figure: 42\n"
    events = _events(r.stdout)
    plans = [e for e in events if e["type"] == "plan"]
    first = [p for p in plans if p["revision"] == 1]
    assert [s["status"] for s in first[-1]["steps"]] == ["failed", "pending"]
    assert "not done" in first[-1]["note"]
    assert "figures.txt could not be read" in first[-1]["steps"][0]["result"]
    last = plans[-1]
    assert last["revision"] == 2 and [s["status"] for s in last["steps"]] == ["failed", "done", "done"]
    # the verdict was asked of the step's model, with the failed tool result in front of it, and only step_verdict
    judge = srv.requests[3]
    assert [t["function"]["name"] for t in judge["tools"]] == ["step_verdict"]
    assert "Read the figures" in judge["messages"][-1]["content"] and "FAILED" in judge["messages"][-1]["content"]
    assert "read_file" in judge["messages"][-1]["content"]
    replan = srv.requests[4]["messages"][-1]["content"]
    assert [t["function"]["name"] for t in srv.requests[4]["tools"]] == ["submit_plan"]
    assert "figures.txt could not be read" in replan
    assert events[-1]["status"] == "completed" and events[-1]["answer"] == "report.txt has the figure 42."


def test_a_step_judged_not_done_fails_the_run_when_no_replan_is_left(serve, shou) -> None:
    srv = serve(FAILED_STEP_SCRIPT[:4])
    r = shou("run", "--plan", "--json", "Write a report from the figures", server=srv, SHOU_MAX_REPLANS="0")
    assert r.returncode == 1, r.stderr
    done = _events(r.stdout)[-1]
    assert done["status"] == "error" and "figures.txt could not be read" in done["error"]
    assert len(srv.requests) == 4


REVIEW_SCRIPT = [
    {"text": "The answer is 42."},
    {"tool_calls": [{"name": "review", "arguments": {"approved": False,
                                                     "feedback": "Say which unit: the task asks for metres."}}]},
    {"text": "The answer is 42 metres."},
    {"tool_calls": [{"name": "review", "arguments": {"approved": True, "feedback": ""}}]},
]


def test_reflection_rejects_then_accepts(serve, shou) -> None:
    srv = serve(REVIEW_SCRIPT)
    # two reviews allowed: the second answer is checked too, and approved
    r = shou("run", "--reflect", "--json", "How long is the rope, in metres?", server=srv, SHOU_MAX_REVIEWS="2")
    assert r.returncode == 0, r.stderr
    events = _events(r.stdout)
    reviews = [e for e in events if e["type"] == "review"]
    assert [(e["approved"], e["feedback"]) for e in reviews] == [
        (False, "Say which unit: the task asks for metres."), (True, "")]
    assert events[-1]["status"] == "completed" and events[-1]["answer"] == "The answer is 42 metres."
    # the critic saw the task and the answer, and was offered only `review`
    critic = srv.requests[1]
    assert [t["function"]["name"] for t in critic["tools"]] == ["review"]
    assert "How long is the rope" in critic["messages"][-1]["content"]
    assert "The answer is 42." in critic["messages"][-1]["content"]
    # the feedback went back to the agent
    again = srv.requests[2]["messages"]
    assert again[-2] == {"role": "assistant", "content": "The answer is 42."}
    assert "Say which unit" in again[-1]["content"] and again[-1]["role"] == "user"
    # both review calls are in the trace, marked as reviews
    t = shou("trace", "--json", server=srv)
    assert len(srv.requests) == 4
    assert t.returncode == 0, t.stderr
    runs = json.loads(t.stdout)["runs"]
    calls = [c for run in runs for c in run["model_calls"]]
    review_calls = [c for c in calls if c["purpose"] == "review"]
    assert len(review_calls) == 2
    assert all(c["response"]["message"]["tool_calls"][0]["function"]["name"] == "review" for c in review_calls)
    reviews = [run for run in runs if any(c["purpose"] == "review" for c in run["model_calls"])]
    assert len(reviews) == 2 and all(run["parent"] == events[0]["run_id"] for run in reviews)
    assert all(run["status"] == "completed" for run in reviews)


def test_with_one_review_the_second_answer_stands_unreviewed(serve, shou) -> None:
    srv = serve(REVIEW_SCRIPT[:3])
    r = shou("run", "--reflect", "--json", "How long is the rope, in metres?", server=srv)
    assert r.returncode == 0, r.stderr
    events = _events(r.stdout)
    assert [e["approved"] for e in events if e["type"] == "review"] == [False]
    assert events[-1]["answer"] == "The answer is 42 metres." and len(srv.requests) == 3
