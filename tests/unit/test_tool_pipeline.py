"""The tool-call pipeline of a run (agent/toolpipe.py): the composed order is the documented one, and its
stages keep the loop's guarantees (write-ahead starts, a stop before anything is screened, waiting calls left
unanswered, results as they finish, parallelism under the limit). A real `Run` on an in-memory session."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from shou import Agent, tool
from shou.agent import toolpipe
from shou.agent.loop import Run
from shou.events import ApprovalDecided, ApprovalRequested, Event, Notice, ToolCallFinished, ToolCallStarted
from shou.messages import ToolCall
from shou.models.scripted import ScriptedModel
from shou.permissions import Policy
from shou.session import Session
from shou.tools.base import ToolContext

WORDS = {"Repeats": "repeat guard", "SizeLimit": "size limit", "PolicyCheck": "policy", "Approval": "approval",
         "InputGate": "question", "InputAnswer": "answer",
         "VisionFallback": "vision fallback", "RepeatNote": "repeat note", "Checkpoint": "checkpoint",
         "Validate": "validate", "Timeout": "timeout", "Contain": "contain", "MarkUntrusted": "mark untrusted",
         "Truncate": "truncate"}


def documented() -> dict[str, list[str]]:
    """The stages as the module's docstring draws them: `stage: a ─► b ─► ...`."""
    doc = re.sub(r"\n\s+─►", " ─►", toolpipe.__doc__ or "")  # a stage's line may go on on the next
    stages = {}
    for stage in ("judge", "screen", "run"):
        line = re.search(rf"^\s*{stage}:\s*(.+?)(?:\s{{2,}}\(|$)", doc, re.M)
        assert line is not None, stage
        stages[stage] = [w.strip() for w in line.group(1).split("─►") if w.strip() != "tool"]
    return stages


def run_for(tmp_path: Path, tools: list, events: list[Event], **fields: Any) -> Run:
    agent = Agent(ScriptedModel([]), tools, workspace=tmp_path, policy=Policy(), **fields)
    run = Run(agent, "test", Session(None, None), events.append)
    run.step = 1
    return run


def calls(*specs: tuple[str, dict]) -> list[ToolCall]:
    return [ToolCall(f"c{i}", name, json.dumps(args)) for i, (name, args) in enumerate(specs)]


def test_the_composed_order_is_the_documented_one(tmp_path: Path) -> None:
    text_only = run_for(tmp_path, [], [], vision=False).tool_pipeline()
    assert {k: [WORDS[n] for n in v] for k, v in toolpipe.order(text_only).items()} == documented()
    seeing = toolpipe.order(run_for(tmp_path, [], [], vision=True).tool_pipeline())
    assert "VisionFallback" not in seeing["run"] and list(seeing["run"][:2]) == ["InputAnswer", "RepeatNote"]


def test_the_pipeline_is_composed_once_per_run(tmp_path: Path) -> None:
    run = run_for(tmp_path, [], [])
    assert run.tool_pipeline() is run.tool_pipeline()


async def test_every_start_is_emitted_and_committed_before_any_call_runs(tmp_path: Path) -> None:
    events: list[Event] = []
    seen: list[int] = []
    commits: list[int] = []

    @tool
    def probe(tag: str) -> str:
        """Count the starts emitted before this call runs."""
        seen.append(sum(isinstance(e, ToolCallStarted) for e in events[:commits[-1]]))
        return tag

    run = run_for(tmp_path, [probe], events)
    run.commit = lambda: commits.append(len(events))  # type: ignore[method-assign]

    async def ahead() -> None:  # the commit before the calls run (shared with other runs in flight, if any)
        commits.append(len(events))

    run.commit_ahead = ahead  # type: ignore[method-assign]
    assert await run.tool_pipeline()(calls(("probe", {"tag": "a"}), ("probe", {"tag": "b"})), turn=True) is None
    assert seen == [2, 2]  # both starts were in what had been committed when either ran
    assert sorted(e.call_id for e in events if isinstance(e, ToolCallFinished)) == ["c0", "c1"]
    assert run.unfinished == {}


async def test_a_stop_ends_the_turn_before_any_call_is_screened_or_run(tmp_path: Path) -> None:
    events: list[Event] = []
    ran: list[str] = []

    @tool(approval="ask")
    def deploy(target: str) -> str:
        """Deploy (asks first)."""
        ran.append(target)
        return "ok"

    run = run_for(tmp_path, [deploy], events, repeat_limit=2, approvals="yes")
    same = ("deploy", {"target": "prod"})
    ended = await run.tool_pipeline()(calls(same, same, same), turn=True)
    assert ended is not None and ended[0] == "loop" and "same arguments again" in (ended[2] or "")
    assert ran == []
    assert not any(isinstance(e, (ApprovalRequested, ApprovalDecided, ToolCallStarted)) for e in events)
    answers = [e for e in events if isinstance(e, ToolCallFinished)]
    assert [a.call_id for a in answers] == ["c0", "c1", "c2"] and all("not run" in a.content for a in answers)
    assert any(isinstance(e, Notice) and e.kind == "loop" for e in events)


async def test_a_deferred_call_stays_unanswered_while_the_others_run(tmp_path: Path) -> None:
    events: list[Event] = []

    @tool(approval="ask")
    def deploy(target: str) -> str:
        """Deploy (asks first)."""
        return "deployed"

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    run = run_for(tmp_path, [deploy, add], events, approvals="defer")
    ended = await run.tool_pipeline()(calls(("deploy", {"target": "prod"}), ("add", {"a": 1, "b": 2})), turn=True)
    assert ended is not None and ended[0] == "waiting_approval" and "1 call(s) wait" in (ended[2] or "")
    assert [e.call_id for e in events if isinstance(e, ToolCallFinished)] == ["c1"]
    assert [e.call.id for e in events if isinstance(e, ApprovalRequested)] == ["c0"]
    assert run.unfinished == {}  # the waiting one is left to be decided and resumed


async def test_results_are_recorded_as_each_finishes_under_the_parallel_limit(tmp_path: Path) -> None:
    events: list[Event] = []
    running, most = 0, 0
    second_done = asyncio.Event()

    @tool
    async def work(tag: str) -> str:
        """Work; the first waits for the second to finish."""
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            if tag == "first":
                await second_done.wait()
            else:
                await asyncio.sleep(0)
                if tag == "second":
                    second_done.set()
            return tag
        finally:
            running -= 1

    run = run_for(tmp_path, [work], events, max_parallel_tools=2)
    batch = calls(("work", {"tag": "first"}), ("work", {"tag": "second"}), ("work", {"tag": "third"}),
                  ("work", {"tag": "fourth"}))
    assert await run.tool_pipeline()(batch, turn=True) is None
    finished = [e.content for e in events if isinstance(e, ToolCallFinished)]
    assert sorted(finished) == ["first", "fourth", "second", "third"]
    assert finished.index("second") < finished.index("first")
    assert most <= 2


async def test_call_tools_goes_through_the_same_pipeline(tmp_path: Path) -> None:
    events: list[Event] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    run = Run(Agent(ScriptedModel([]), [add], workspace=tmp_path, policy=Policy(deny=["add"])), "t",
              Session(None, None), events.append)
    assert await run.call_tools(calls(("add", {"a": 1, "b": 2}))) is None
    [answer] = [e for e in events if isinstance(e, ToolCallFinished)]
    assert "denied by policy" in answer.content
    big = ToolCall("huge", "add", json.dumps({"a": "x" * 1_000_001}))
    await run.call_tools([big])
    assert [e for e in events if isinstance(e, ToolCallFinished)][-1].content.startswith("Error: not run: the argum")


def test_the_loop_names_no_control() -> None:
    import ast

    from shou.agent import loop, tool_controls
    from shou.tools import controls

    source = Path(loop.__file__).read_text()
    names = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Attribute)}
    imported = {a.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom) for a in n.names}
    controls_ = {*tool_controls.__all__, *controls.__all__, "RepeatGuard", "Gate", "without_image"}
    assert not (names | imported) & controls_


async def test_the_pipeline_is_composed_at_the_first_tool_call_and_tools_see_the_working_memory(
        tmp_path: Path, monkeypatch: Any) -> None:
    """A run waiting for the model holds no tool pipeline (issue 35: thousands of parked runs), and one that only
    answers never makes one; a run that calls tools makes it once, and its tools see the session's scratchpad
    (written by an earlier run: the new run's context gets it from the session, not from the tool)."""
    from shou.agent import loop
    from shou.tools.builtin.working_memory import working_memory

    made: list[object] = []

    class Counted(toolpipe.ToolPipeline):
        __slots__ = ()

        def __init__(self, *args: Any) -> None:
            made.append(self)
            super().__init__(*args)

    monkeypatch.setattr(loop, "ToolPipeline", Counted)
    seen: list[object] = []

    @tool
    def peek(ctx: ToolContext) -> str:
        """Say what the working memory holds."""
        seen.append(ctx.state.get("working_memory"))
        return "ok"

    answers = Agent(ScriptedModel([{"text": "done"}]), [peek], workspace=tmp_path, policy=Policy())
    assert (await answers.arun("t")).answer == "done"
    assert made == []
    session = Session(None, None)
    note = Agent(ScriptedModel([{"tool_calls": [{"name": "working_memory", "arguments": {"content": "milk"}}]},
                                {"text": "noted"}]), [working_memory], workspace=tmp_path, policy=Policy())
    assert (await note.arun("t", session)).answer == "noted"
    calling = Agent(ScriptedModel([{"tool_calls": [{"name": "peek", "arguments": {}}]},
                                   {"tool_calls": [{"name": "peek", "arguments": {}}]}, {"text": "done"}]),
                    [peek], workspace=tmp_path, policy=Policy())
    made.clear()
    assert (await calling.arun("t", session)).answer == "done"
    assert len(made) == 1 and seen == ["milk", "milk"]
