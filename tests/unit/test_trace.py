"""Run traces and the usage report, rebuilt from hand-made event logs (shou.trace, `shou trace`, `shou usage`)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shou import trace as tr
from shou import usage_report as ur
from shou.agent.emitter import Emitter
from shou.agent.recorder import RequestRecorder
from shou.cli.app import app
from shou.events import (
    Compacted,
    ModelRequest,
    ModelResponse,
    Notice,
    RunFinished,
    RunResumed,
    RunStarted,
    StepFinished,
    ToolCallFinished,
    ToolCallStarted,
)
from shou.messages import Message, ToolCall
from shou.session import Session
from shou.store.sqlite import SQLiteStore
from shou.usage import Usage

SYSTEM = Message.system("You are shou.")
TASK = Message.user("What is 123 * 45?")
CALL = ToolCall("call_1", "calculator", '{"expression": "123 * 45"}')
ASKED = Message.assistant(None, [CALL])
RESULT = Message.tool("call_1", "calculator", "5535")
SPECS = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    ws = tmp_path / "ws"
    ws.mkdir()
    s = SQLiteStore.for_workspace(ws)
    yield s
    s.close()


def two_steps(session: Session, run: str = "run_a1", *, finish: bool = True, cost: float | None = 0.001) -> None:
    """A calculator call and the answer, logged as the loop logs them (requests by hash)."""
    rec = RequestRecorder(session.trace_keys)
    tools = rec.tools(SPECS)
    Emitter(session).emit(RunStarted(run, session.name, TASK.text, "gpt-x"))
    Emitter(session).emit(ModelRequest(run, 1, 2, 1, 40, f"mc_{run}_1", "gpt-x", "openai", rec.messages([SYSTEM, TASK]),
                                tools, {"temperature": 0.2}, rec.take()))
    Emitter(session).emit(ModelResponse(run, 1, ASKED, Usage(40, 10, 1, cached_tokens=8, cost=cost), 0.5, "tool_calls",
                                 "gpt-x-2025", f"mc_{run}_1", ttft=0.1, retries=1))
    Emitter(session).emit(ToolCallStarted(run, 1, CALL))
    Emitter(session).emit(ToolCallFinished(run, 1, "call_1", "calculator", "5535", latency=0.01))
    Emitter(session).emit(StepFinished(run, 1))
    if not finish:
        session.commit()
        return
    Emitter(session).emit(ModelRequest(run, 2, 4, 1, 60, f"mc_{run}_2", "gpt-x", "openai",
                                rec.messages([SYSTEM, TASK, ASKED, RESULT]), tools, {"temperature": 0.2}, rec.take()))
    Emitter(session).emit(ModelResponse(run, 2, Message.assistant("123 * 45 = 5535"), Usage(60, 5, 1, cost=0.002), 0.3,
                                 "stop", "gpt-x-2025", f"mc_{run}_2"))
    Emitter(session).emit(StepFinished(run, 2))
    Emitter(session).emit(RunFinished(run, "completed", "123 * 45 = 5535", 2, Usage(100, 15, 2), 1.0))
    session.commit()


def test_a_run_is_steps_of_one_model_call_and_its_tool_calls(store: SQLiteStore) -> None:
    two_steps(Session("s", store))
    [run] = tr.traces(store, "s")
    assert (run.run_id, run.task, run.status, run.model) == ("run_a1", TASK.text, "completed", "gpt-x")
    assert [s.step for s in run.steps] == [1, 2]
    first, second = run.model_calls
    assert (first.id, first.model, first.response_model, first.provider) == ("mc_run_a1_1", "gpt-x", "gpt-x-2025",
                                                                              "openai")
    assert (first.ttft, first.retries, first.finish_reason) == (0.1, 1, "tool_calls")
    assert first.params == {"temperature": 0.2}
    assert first.messages is None  # resolved only on demand
    [tool] = run.steps[0].tool_calls
    assert (tool.name, tool.content, tool.started, tool.is_error, tool.step) == ("calculator", "5535", True, False, 1)
    assert run.steps[1].tool_calls == [] and second.message.text == "123 * 45 = 5535"
    usage, known = run.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens, usage.requests) == (100, 15, 8, 2)
    assert usage.cost == pytest.approx(0.003) and known == pytest.approx(0.003)
    assert run.started <= run.ended
    assert tr.find_run(store, "run_a1").model_calls[1].id == "mc_run_a1_2"
    assert tr.find_run(store, "run_none") is None


def test_a_call_found_by_id_has_its_request_resolved(store: SQLiteStore) -> None:
    two_steps(Session("s", store))
    run, call = tr.find_model_call(store, "mc_run_a1_2")
    assert run.run_id == "run_a1"
    assert call.messages == [m.to_wire() for m in (SYSTEM, TASK, ASKED, RESULT)]
    assert call.tools == SPECS and call.pruned == 0
    data = tr.call_json(call)
    assert data["request"]["messages"][-1] == {"role": "tool", "content": "5535", "tool_call_id": "call_1",
                                               "name": "calculator"}
    assert data["usage"]["cost"] == pytest.approx(0.002) and data["response"]["finish_reason"] == "stop"
    assert tr.find_model_call(store, "mc_nope") is None


def test_a_pruned_message_is_shown_as_pruned(store: SQLiteStore) -> None:
    two_steps(Session("s", store))
    [key] = RequestRecorder(None).messages([RESULT])
    store._db.execute(f"UPDATE events SET data = json_remove(data, '$.contents.\"{key}\"')")
    _, call = tr.find_model_call(store, "mc_run_a1_2")
    assert call.messages[:3] == [m.to_wire() for m in (SYSTEM, TASK, ASKED)]
    assert call.messages[3] == {"_pruned": key} and call.pruned == 1
    shown = CliRunner().invoke(app, ["trace", "show", "mc_run_a1_2", "-w", str(store.path.parent.parent)])
    assert shown.exit_code == 0, shown.output
    assert "pruned: retention deleted this message's content" in shown.output
    assert "What is 123 * 45?" in shown.output and "calculator" in shown.output


def test_a_killed_run_is_unfinished_with_what_it_logged(store: SQLiteStore) -> None:
    session = Session("s", store)
    two_steps(session, finish=False)
    Emitter(session).emit(ModelRequest("run_a1", 2, 4, 1, 60, "mc_x", "gpt-x"))
    session.commit()
    [run] = tr.traces(store, "s")
    assert run.status == tr.UNFINISHED and run.wall_time is None
    assert [c.answered for c in run.model_calls] == [True, False]
    assert run.model_calls[1].error is None  # it may still come: the run may be running
    assert run.steps[0].tool_calls[0].content == "5535"
    assert tr.run_json(run)["usage"]["requests"] == 1


def test_a_resumed_run_asks_again_and_old_logs_name_calls_by_step(store: SQLiteStore) -> None:
    session = Session("s", store)
    Emitter(session).emit(RunStarted("run_o", "s", "old task", "openai:gpt-4o"))
    Emitter(session).emit(ModelRequest("run_o", 1, 1, 0))  # an old log: no request id, no hashes
    Emitter(session).emit(RunResumed("run_o", "s", 1))
    Emitter(session).emit(ModelRequest("run_o", 1, 1, 0))
    Emitter(session).emit(ModelResponse("run_o", 1, Message.assistant("hi"), Usage(5, 1, 1, cost=None), 0.2))
    Emitter(session).emit(RunFinished("run_o", "completed", "hi", 1, Usage(5, 1, 1), 0.5))
    session.commit()
    [run] = tr.traces(store, "s")
    first, again = run.model_calls
    assert (first.id, again.id) == ("run_o:1", "run_o:1.2")
    assert not first.answered and "process stopped" in first.error and again.error is None
    assert run.resumed == 1 and run.status == "completed" and again.model == "openai:gpt-4o"
    assert run.usage[0].cost is None  # a cost not logged is unknown, not zero
    _, found = tr.find_model_call(store, "run_o:1.2")
    assert not found.recorded and found.messages is None


def test_a_run_ended_by_an_error_during_a_call_says_so_on_the_call(store: SQLiteStore) -> None:
    session = Session("s", store)
    Emitter(session).emit(RunStarted("run_e", "s", "t", "m"))
    Emitter(session).emit(Notice("run_e", 0, "memory", "recall failed: OSError"))
    Emitter(session).emit(ModelRequest("run_e", 1, 1, 0, request_id="mc_e"))
    Emitter(session).emit(Notice("run_e", 1, "retry", "HTTP 500; retry 1 in 0.5 s"))
    Emitter(session).emit(RunFinished("run_e", "error", "", 1, Usage(), 2.0, "the provider failed: HTTP 500"))
    session.commit()
    [run] = tr.traces(store, "s")
    [call] = run.model_calls
    assert call.error == "the provider failed: HTTP 500" and call.notes == ["HTTP 500; retry 1 in 0.5 s"]
    assert [s.step for s in run.steps] == [1]  # a notice outside any step makes none
    assert [n[:2] for n in run.notices] == [(0, "memory"), (1, "retry")]
    shown = CliRunner(env={"COLUMNS": "100"}).invoke(app, ["trace", "-w", str(store.path.parent.parent)])
    assert "! recall failed: OSError" in shown.output and "the provider failed: HTTP 500" in shown.output
    assert "HTTP 500; retry 1" in shown.output and shown.output.count("retry 1 in") == 1


def test_compactions_count_their_summary_call(store: SQLiteStore) -> None:
    session = Session("s", store)
    two_steps(session, finish=False)
    Emitter(session).emit(Compacted("run_a1", "summary", 3, 900, 200, Usage(800, 50, 1, cost=0.0005), "gpt-x", 1.5))
    Emitter(session).emit(Compacted("run_a1", "older", 5, 600, 100))  # an old log: the summary call's usage not kept
    session.commit()
    [run] = tr.traces(store, "s")
    new, old = run.compactions
    assert (new.step, new.tokens_before, new.tokens_after, new.usage.input_tokens) == (2, 900, 200, 800)
    assert old.usage is None
    usage, known = run.usage
    assert usage.requests == 3 and usage.cost is None and known == pytest.approx(0.0015)


def _set_day(store: SQLiteStore, run_id: str, day: str) -> None:
    ts = dt.datetime.fromisoformat(day).replace(hour=12, tzinfo=dt.UTC).timestamp()
    store._db.execute("UPDATE events SET ts = ? WHERE run_id = ?", (ts, run_id))


def test_usage_is_summed_per_day_model_and_session_and_unknown_stays_unknown(store: SQLiteStore) -> None:
    two_steps(Session("a", store), "run_1")
    two_steps(Session("b", store), "run_2", cost=None)  # its first call had no price
    two_steps(Session("b", store), "run_3")
    _set_day(store, "run_1", "2025-03-01")
    _set_day(store, "run_2", "2025-03-01")
    _set_day(store, "run_3", "2025-03-02")
    rows = ur.usage_report(store)
    assert [(r.day, r.model, r.session) for r in rows] == [("2025-03-01", "gpt-x", "a"), ("2025-03-01", "gpt-x", "b"),
                                                           ("2025-03-02", "gpt-x", "b")]
    assert rows[0].cost == pytest.approx(0.003) and rows[0].requests == 2
    assert rows[1].cost is None and rows[1].known_cost == pytest.approx(0.002)  # the known part is kept
    assert (rows[2].input_tokens, rows[2].output_tokens, rows[2].cached_tokens) == (100, 15, 8)
    by_day = ur.usage_report(store, ("day",))
    assert [(r.day, r.requests, r.cost) for r in by_day] == [("2025-03-01", 4, None),
                                                              ("2025-03-02", 2, pytest.approx(0.003))]
    total = ur.usage_total(by_day)
    assert (total.requests, total.input_tokens, total.cost) == (6, 300, None)
    assert total.known_cost == pytest.approx(0.008)
    [recent] = ur.usage_report(store, ("session",), since=dt.datetime(2025, 3, 2, tzinfo=dt.UTC).timestamp())
    assert (recent.session, recent.requests, recent.day, recent.model) == ("b", 2, "", "")
    with pytest.raises(ValueError, match="week"):
        ur.usage_report(store, ("week",))


def test_the_cli_shows_the_timeline_and_usage_on_100_columns(store: SQLiteStore) -> None:
    two_steps(Session("a", store), "run_1")
    two_steps(Session("b", store), "run_2", cost=None)
    ws = str(store.path.parent.parent)
    runner = CliRunner(env={"COLUMNS": "100", "NO_COLOR": "1"})
    shown = runner.invoke(app, ["trace", "b", "-w", ws])
    assert shown.exit_code == 0, shown.output
    assert max(len(line) for line in shown.output.splitlines()) <= 100
    assert "mc_run_2_1" in shown.output and "→ calculator(expression=\"123 * 45\")" in shown.output
    assert "≥ $0.0020" in shown.output and "unknown" in shown.output  # the first call's cost, the total's part
    data = json.loads(runner.invoke(app, ["trace", "run_1", "--json", "-w", ws]).output)
    assert data["session"] == "a" and data["runs"][0]["model_calls"][0]["request"]["messages"][1] == TASK.to_wire()
    report = runner.invoke(app, ["usage", "--by", "session", "-w", ws])
    assert report.exit_code == 0 and "≥ $0.0020" in report.output and "total" in report.output
    usage = json.loads(runner.invoke(app, ["usage", "--json", "--by", "model,session", "-w", ws]).output)
    assert usage["by"] == ["model", "session"] and usage["total"]["requests"] == 4 and usage["total"]["cost"] is None
    assert runner.invoke(app, ["trace", "show", "-w", ws]).exit_code == 2
    assert runner.invoke(app, ["usage", "--by", "week", "-w", ws]).exit_code == 2


def test_terminal_control_sequences_from_the_log_never_reach_the_terminal(store: SQLiteStore) -> None:
    """A provider names the model it answered with, a tool prints what it likes, a cloned repository can
    ship a log: none of it may clear the screen or retitle the terminal when `shou trace` prints it."""
    evil = "gpt\x1b[2J\x1b]0;pwned\x07"
    session = Session("s", store)
    Emitter(session).emit(RunStarted("run_x", "s", f"task {evil}", evil))
    Emitter(session).emit(ModelRequest("run_x", 1, 1, 0, 10, "mc_x", evil, evil))
    Emitter(session).emit(ModelResponse("run_x", 1, Message.assistant(f"said {evil}"), Usage(1, 1, 1, cost=None), 0.1,
                                 evil, evil, "mc_x"))
    Emitter(session).emit(RunFinished("run_x", "error", "", 1, Usage(1, 1, 1), 0.2, f"failed {evil}"))
    session.commit()
    ws = str(store.path.parent.parent)
    for args in (["trace", "-w", ws], ["trace", "show", "mc_x", "-w", ws], ["usage", "-w", ws]):
        shown = CliRunner(env={"COLUMNS": "120"}).invoke(app, args)
        assert shown.exit_code == 0, shown.output
        assert "\x1b" not in shown.output and "\x07" not in shown.output, (args, shown.output)
    # --json keeps the text, with what a terminal could act on escaped (JSON escapes C0 controls; C1 and
    # the line separators it leaves raw), and stays the same JSON
    c1 = "csi\x9b2J osc\x9d0;pwned\x9c line\u2028end"
    Emitter(session).emit(ModelResponse("run_x", 2, Message.assistant(c1), Usage(1, 1, 1), 0.1, request_id="mc_y"))
    session.commit()
    for args in (["trace", "--json", "-w", ws], ["trace", "show", "mc_y", "--json", "-w", ws]):
        shown = CliRunner(env={"COLUMNS": "120"}).invoke(app, args)
        assert shown.exit_code == 0, shown.output
        assert not any(ch in shown.output for ch in "\x9b\x9d\x9c\u2028"), args
        assert json.dumps(c1)[1:-1] in json.dumps(json.loads(shown.output))  # the same text, parsed back


@pytest.mark.parametrize("message", [
    {"role": "assistant", "content": "x", "tool_calls": ["not a call", 7, None]},
    {"role": "assistant", "content": [{"type": "image_url", "image_url": "not a table"}, "text?", 3]},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": "not a table"}]},
    {"role": "user", "content": {"odd": True}, "tool_calls": "calls"},
])
def test_a_planted_log_with_odd_request_messages_cannot_crash_trace_show(store: SQLiteStore, message) -> None:
    """A cloned repository can ship `.shou/shou.db`: whatever shape a recorded message has, `shou trace show`
    prints what it can and exits cleanly."""
    session = Session("s", store)
    Emitter(session).emit(RunStarted("run_p", "s", "task", "m"))
    Emitter(session).emit(ModelRequest("run_p", 1, 1, 0, 10, "mc_p", "m", "p", ("k1",), contents={"k1": message}))
    session.commit()
    ws = str(store.path.parent.parent)
    shown = CliRunner(env={"COLUMNS": "120"}).invoke(app, ["trace", "show", "mc_p", "-w", ws])
    assert shown.exit_code == 0, shown.output
    assert "Traceback" not in shown.output


def test_a_sub_run_its_process_died_in_is_interrupted_once_its_parent_went_on(store: SQLiteStore) -> None:
    session = Session("s", store)
    Emitter(session).emit(RunStarted("run_p", "s", "delegate", "m"))
    Emitter(session).emit(RunStarted("run_p.1", "s", "child task", "m", parent="run_p"))
    Emitter(session).emit(ModelRequest("run_p.1", 1, 1, 0, 10, "mc_c", "m", "p", parent="run_p"))
    session.commit()
    [parent, child] = tr.traces(store, "s")
    assert child.status == tr.UNFINISHED  # nothing says yet that it will not go on
    Emitter(session).emit(RunResumed("run_p", "s", 1, 0.0))
    Emitter(session).emit(RunFinished("run_p", "completed", "done", 1, Usage(), 0.1))
    session.commit()
    [parent, child] = tr.traces(store, "s")
    assert parent.status == "completed" and child.status == tr.INTERRUPTED
    assert child.model_calls[0].error and "process stopped" in child.model_calls[0].error


def test_a_system_text_and_tool_specs_made_again_are_recorded_once_and_again_when_the_log_forgets_them() -> None:
    # Each request gets a new system message and its own list of the same spec dicts: hashed once per run,
    # with the same keys as hashing them afresh, and their contents offered again once the log lost them.
    known: set[str] = set()
    rec = RequestRecorder(known)
    fresh = RequestRecorder(None)
    first = rec.messages([Message.system("be brief"), TASK])
    assert set(rec.take() or {}) == set(first)
    again = rec.messages([Message.system("be brief"), TASK])
    assert again == first == fresh.messages([Message.system("be brief"), TASK]) and rec.take() is None
    other = rec.messages([Message.system("be briefer")])
    assert other != first[:1] and set(rec.take() or {}) == set(other)
    specs = rec.tools(list(SPECS))
    assert specs == fresh.tools(list(SPECS)) and rec.take() == {specs: SPECS}
    assert rec.tools(list(SPECS)) == specs and rec.take() is None
    known.clear()  # the log no longer holds them (a cleared history): the contents come again
    assert rec.messages([Message.system("be brief")]) == first[:1] and set(rec.take() or {}) == set(first[:1])
    assert rec.tools(list(SPECS)) == specs and rec.take() == {specs: SPECS}


def test_what_every_run_sends_alike_is_hashed_once_for_all_but_logged_in_each_session() -> None:
    # System texts and tool specs are known process-wide by their hash; each session's log still gets their
    # contents once, and a run that holds a redactor never reuses a hash made without one.
    from shou.redact import Redactor

    one, two = RequestRecorder(set()), RequestRecorder(set())
    system = one.messages([Message.system("shared rules")])
    specs = one.tools(list(SPECS))
    assert set(one.take() or {}) == {*system, specs}
    assert two.messages([Message.system("shared rules")]) == system
    assert two.tools(list(SPECS)) == specs
    assert set(two.take() or {}) == {*system, specs}  # the second session's log holds them too
    secret = "sk-" + "s3cr3t" * 4
    plain = RequestRecorder(set()).messages([Message.system(f"key {secret}")])
    redacted = RequestRecorder(set(), Redactor([secret]))
    [key] = redacted.messages([Message.system(f"key {secret}")])
    assert (key,) != plain and secret not in str(redacted.take())


def test_what_is_hashed_once_for_all_runs_holds_a_bounded_amount_after_they_end() -> None:
    # The process-wide table keeps each system text it was keyed on (and each set of specs) alive after its run
    # ended. A system text is the caller's own words under `shou serve` (an OpenAI-style request's system
    # messages, up to the 2 MB body), so many callers each sending their own big one must not pin hundreds of
    # MB: 511 runs with 400 KB texts held 204.6 MB (tracemalloc) after every run had ended.
    from shou.agent import recorder

    recorder._SHARED.clear()
    for i in range(100):
        RequestRecorder(set()).messages([Message.system(f"{i:04d} " + "rule " * 80_000)])
    for i in range(20):
        specs = [{"type": "function", "function": {"name": f"t{i}", "parameters": {"x": "y" * 400_000}}}]
        RequestRecorder(set()).tools(specs)
    held = sum(len(what) for what, _ in recorder._SHARED if isinstance(what, str))
    held += sum(len(str(entry[1])) for entry in recorder._SHARED.values() if entry[1] is not None)
    assert held <= 10_000_000, f"{held / 1e6:.1f} MB of texts and specs held after their runs ended"
    # What runs send alike is still hashed once: a small system text is known again at once.
    one, two = RequestRecorder(set()), RequestRecorder(set())
    assert one.messages([Message.system("rules")]) == two.messages([Message.system("rules")])
    assert ("rules", id(None)) in recorder._SHARED
