"""Each control of the tool-call pipeline on its own: called with a `next` that records what it was given, it
passes the call on or answers it. The run's controls work for a real `Run` (an in-memory session)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from shou import Agent, tool
from shou.agent.approvals import Gate
from shou.agent.guards import RepeatGuard
from shou.agent.loop import Run
from shou.agent.tool_controls import (
    OVERSIZED,
    Approval,
    PolicyCheck,
    RepeatNote,
    Repeats,
    SizeLimit,
    VisionFallback,
    admit,
)
from shou.errors import ToolError
from shou.events import ApprovalDecided, ApprovalRequested, Event, Notice, ToolCallFinished
from shou.messages import ImagePart, ToolCall
from shou.models.scripted import ScriptedModel
from shou.permissions import Policy
from shou.session import Session
from shou.tools import ToolContext, ToolSet
from shou.tools.base import ToolResult
from shou.tools.controls import Contain, MarkUntrusted, Timeout, Truncate, Validate, invoke
from shou.tools.pipeline import Invocation, compose
from shou.tools.untrusted import UNTRUSTED_OPEN


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(untrusted_output=True)
def fetch(url: str) -> str:
    """Fetch a page (its output is outside content)."""
    return f"page at {url}"


@tool(approval="ask")
def deploy(target: str) -> str:
    """Deploy somewhere (asks first)."""
    return f"deployed {target}"


class Recorder:
    """A `next` that records the calls it gets and answers with `answer`."""

    def __init__(self, answer: Any = "run") -> None:
        self.answer = answer
        self.seen: list[Invocation] = []

    async def __call__(self, inv: Invocation) -> Any:
        self.seen.append(inv)
        return self.answer


def inv(name: str, ctx: ToolContext | None = None, call_id: str = "c1", **args: Any) -> Invocation:
    return Invocation(ToolCall(call_id, name, json.dumps(args)), ctx)


def run_for(tmp_path: Path, events: list[Event], **fields: Any) -> Run:
    agent = Agent(ScriptedModel([]), [add, fetch, deploy], workspace=tmp_path, **fields)
    run = Run(agent, "test", Session(None, None), events.append)
    run.step = 1
    return run


# -- the executor's controls -------------------------------------------------------------------------------

async def test_validate_answers_an_unknown_tool_broken_json_and_a_schema_violation_without_running() -> None:
    rest = Recorder(ToolResult("ran"))
    validate = Validate(ToolSet([add, fetch]))
    unknown = await validate(inv("nope"), rest)
    assert unknown.is_error and "no tool named 'nope'" in unknown.content and "add, fetch" in unknown.content
    broken = await validate(Invocation(ToolCall("c", "add", "[1, 2]"), None), rest)
    assert broken.is_error and "must be a JSON object" in broken.content
    wrong = await validate(inv("add", a="x", b=2), rest)
    assert wrong.is_error and "Fix the arguments" in wrong.content
    assert rest.seen == []


async def test_validate_passes_checked_arguments_and_whether_the_output_is_from_outside() -> None:
    rest = Recorder(ToolResult("ran"))
    validate = Validate(ToolSet([add, fetch]))
    assert (await validate(inv("add", a=1, b=2), rest)).content == "ran"
    assert (await validate(inv("fetch", url="http://x"), rest)).content == "ran"
    plain, outside = rest.seen
    assert plain.tool is add and plain.kwargs == {"a": 1, "b": 2} and not plain.untrusted
    assert outside.tool is fetch and outside.untrusted


async def test_timeout_stops_a_slow_call_records_that_it_started_and_the_cap_rules_every_tool() -> None:
    started: set[str] = set()

    async def slow(i: Invocation) -> ToolResult:
        await asyncio.sleep(30)
        return ToolResult("late")

    call = inv("add", a=1, b=2)
    call.tool = add
    result = await Timeout(0.05, None, started)(call, slow)
    assert result.is_error and "did not finish within 0.05 s" in result.content
    assert started == {"c1"}
    capped = inv("add", call_id="c2")
    capped.tool = add
    assert (await Timeout(100.0, 2.0, started)(capped, Recorder(ToolResult("ok")))).content == "ok"
    assert capped.limit == 3.0  # the person's cap, plus the second of grace a self-limiting tool gets


async def test_contain_turns_what_a_tool_raises_into_errors_marked_when_from_outside() -> None:
    async def raising(error: BaseException) -> ToolResult:
        async def next_(i: Invocation) -> ToolResult:
            raise error
        return await Contain()(call, next_)

    call = inv("add")
    assert (await raising(ToolError("locked"))).content == "Error: locked"
    boom = await raising(KeyError("k"))
    assert boom.is_error and "add raised KeyError" in boom.content
    call.untrusted = True
    assert (await raising(ToolError("from the server"))).content.startswith(UNTRUSTED_OPEN)
    with pytest.raises(TimeoutError):  # the deadline's to answer
        await raising(TimeoutError())


async def test_mark_untrusted_marks_outside_content_only() -> None:
    call = inv("fetch")
    assert (await MarkUntrusted()(call, Recorder(ToolResult("mine")))).content == "mine"
    flagged = await MarkUntrusted()(call, Recorder(ToolResult("a page", untrusted=True)))
    assert flagged.content.startswith(UNTRUSTED_OPEN) and flagged.untrusted and "a page" in flagged.content
    call.untrusted = True
    assert (await MarkUntrusted()(call, Recorder(ToolResult("page")))).content.startswith(UNTRUSTED_OPEN)


async def test_truncate_spills_a_big_result_and_names_outside_content_untrusted(tmp_path: Path) -> None:
    ctx = ToolContext(tmp_path, "s", "r")
    call = inv("fetch", ctx)
    assert (await Truncate(100)(call, Recorder(ToolResult("small")))).content == "small"
    call.untrusted = True
    cut = await Truncate(100)(call, Recorder(ToolResult("x" * 5000)))
    assert len(cut.content) < 1000 and "5000 characters" in cut.content
    [spilled] = (tmp_path / ".shou" / "outputs").iterdir()
    assert spilled.name.startswith("untrusted-fetch") and spilled.read_text() == "x" * 5000


async def test_invoke_calls_the_tool_and_compose_keeps_the_order() -> None:
    order: list[str] = []

    class Mark:
        def __init__(self, name: str) -> None:
            self.name = name

        async def __call__(self, i: Invocation, next_: Any) -> ToolResult:
            order.append(self.name)
            return await next_(i)

    call = inv("add", a=2, b=3)
    call.tool, call.kwargs = add, {"a": 2, "b": 3}
    assert (await compose([Mark("a"), Mark("b"), Mark("c")], invoke)(call)).content == "5"
    assert order == ["a", "b", "c"]


# -- the run's controls --------------------------------------------------------------------------------------

async def test_repeats_warns_at_the_limit_and_stops_after_it() -> None:
    notes: dict[str, str] = {}
    repeats, rest = Repeats(RepeatGuard(2), notes), Recorder()
    assert await repeats(inv("add", call_id="a", a=1), rest) == "run" and notes == {}
    assert await repeats(inv("add", call_id="b", a=1), rest) == "run" and "called add 2 times" in notes["b"]
    assert await repeats(inv("add", call_id="c", a=1), rest) == "stop"
    assert [i.call.id for i in rest.seen] == ["a", "b"]
    assert await repeats(inv("add", call_id="d", a=2), rest) == "run"  # other arguments: a new count


async def test_size_limit_refuses_an_oversized_call_and_answers_it(tmp_path: Path) -> None:
    events: list[Event] = []
    run = run_for(tmp_path, events)
    big = inv("add", call_id="big")
    run.unfinished = {"big": big.call}
    limit, rest = SizeLimit(run, {"big"}), Recorder()
    assert await limit(big, rest) == "refused"
    assert await limit(inv("add", call_id="ok", a=1, b=2), rest) == "run"
    assert [i.call.id for i in rest.seen] == ["ok"] and run.unfinished == {}
    [answer] = [e for e in events if isinstance(e, ToolCallFinished)]
    assert answer.call_id == "big" and answer.is_error and answer.content == OVERSIZED


def screening(tmp_path: Path, events: list[Event], **fields: Any) -> tuple[PolicyCheck, Approval, dict]:
    gate, questions = Gate(run_for(tmp_path, events, **fields)), {}
    return PolicyCheck(gate, questions), Approval(gate, questions), questions


async def test_policy_runs_allowed_calls_refuses_denied_ones_and_leaves_asks_to_a_person(tmp_path: Path) -> None:
    events: list[Event] = []
    rest = Recorder()
    policy, _, questions = screening(tmp_path, events, policy=Policy(deny=["add"]))
    assert await policy(inv("fetch", call_id="f", url="http://x"), rest) == "run" and questions == {}
    assert await policy(inv("add", call_id="d", a=1, b=2), rest) == "refused"
    assert [i.call.id for i in rest.seen] == ["f"]
    refusal = [e for e in events if isinstance(e, ToolCallFinished)][-1]
    assert refusal.call_id == "d" and "denied by policy" in refusal.content
    assert await policy(inv("deploy", call_id="q", target="prod"), rest) == "run"
    assert list(questions) == ["q"] and "deploy" in questions["q"].rule
    assert [e.call_id for e in events if isinstance(e, ApprovalDecided)] == ["d"]  # the policy's refusal, recorded
    assert not any(isinstance(e, ApprovalRequested) for e in events)  # no one was asked about "q" yet


async def test_approval_asks_only_about_what_the_policy_left_to_a_person(tmp_path: Path) -> None:
    events: list[Event] = []
    rest = Recorder()
    policy, approval, questions = screening(tmp_path, events, policy=Policy(), approvals="defer")
    assert await approval(inv("add", call_id="a", a=1, b=2), rest) == "run"  # no question: passes on
    await policy(inv("deploy", call_id="w", target="prod"), rest)
    assert await approval(inv("deploy", call_id="w", target="prod"), rest) == "wait" and questions == {}
    assert [i.call.id for i in rest.seen] == ["a", "w"]  # the policy passed it on; the approval kept it
    assert any(isinstance(e, ApprovalRequested) and e.call.id == "w" for e in events)

    policy, approval, _ = screening(tmp_path, events, policy=Policy(), approvals="yes")
    await policy(inv("deploy", call_id="y", target="prod"), rest)
    assert await approval(inv("deploy", call_id="y", target="prod"), rest) == "run"
    assert any(isinstance(e, ApprovalDecided) and e.call_id == "y" and e.allow for e in events)

    policy, approval, _ = screening(tmp_path, events, policy=Policy(), approvals="deny")
    await policy(inv("deploy", call_id="n", target="prod"), rest)
    assert await approval(inv("deploy", call_id="n", target="prod"), rest) == "refused"
    assert "no one could be asked" in [e for e in events if isinstance(e, ToolCallFinished)][-1].content


async def test_repeat_note_appends_the_warning_and_says_so(tmp_path: Path) -> None:
    events: list[Event] = []
    run = run_for(tmp_path, events)
    note = RepeatNote(run, {"w": "\n\n[shou] stop repeating"}, 3)
    assert (await note(inv("add", call_id="plain"), Recorder(ToolResult("5")))).content == "5"
    assert events == []
    warned = await note(inv("add", call_id="w"), Recorder(ToolResult("5")))
    assert warned.content == "5\n\n[shou] stop repeating"
    [notice] = events
    assert isinstance(notice, Notice) and notice.kind == "repeat" and "repeated 3 times" in notice.text


async def test_vision_fallback_gives_a_text_only_model_the_pages_text() -> None:
    image = ImagePart("iVBORw0KGgo=", "image/png")
    plain = await VisionFallback()(inv("shot"), Recorder(ToolResult("no image")))
    assert plain.content == "no image"
    shot = await VisionFallback()(inv("shot"), Recorder(ToolResult("(image)", image=image,
                                                                  details={"page_text": "Hello page"})))
    assert shot.image is None and "cannot see images" in shot.content
    assert UNTRUSTED_OPEN in shot.content and "Hello page" in shot.content


async def test_admit_ends_screening() -> None:
    assert await admit(inv("add")) == "run"
