"""Guardrails (agent/guardrails.py, agent/guarded.py): input checks that stop a run before any tool runs, in
parallel with the first model call; output checks that block an answer; model-judged rules through the run's
model pipeline; resumed runs; and where `[guardrails]` may come from. The in-process scripted model, a real
SQLite log."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from shou import Agent, Guardrail, GuardrailResult, ScriptedModel, input_guardrail, output_guardrail, tool
from shou.agent.config import AgentConfig
from shou.agent.emitter import Emitter
from shou.agent.guarded import GuardedRun
from shou.agent.runs import PlannedRun, ReactRun, ReviewedRun, kind_of
from shou.config import load_settings
from shou.errors import UserError
from shou.event_codec import event_from_dict
from shou.events import (
    Event,
    Feedback,
    GuardrailTripped,
    ModelRequest,
    ModelResponse,
    RunFinished,
    RunStarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
)
from shou.messages import Message, ToolCall
from shou.session import Session
from shou.store.sqlite import SQLiteStore
from shou.trust import TrustStore
from shou.usage import Usage

WAIT = 30.0  # seconds a test waits for an event before it fails (never reached when the code works)


@pytest.fixture
def effects() -> list[str]:
    return []


@pytest.fixture
def touch(effects: list[str]):
    @tool
    def touch(name: str) -> str:
        """Create a file (a side effect).

        Args:
            name: the file
        """
        effects.append(name)
        return "created"

    return touch


def touching(name: str = "x") -> dict:
    return {"tool_calls": [{"name": "touch", "arguments": {"name": name}}]}


def verdict(broken: bool, reason: str) -> dict:
    return {"tool_calls": [{"name": "guardrail_verdict", "arguments": {"broken": broken, "reason": reason}}]}


def own(events: list[Event], kind: type) -> list:
    return [e for e in events if isinstance(e, kind) and not e.parent]


async def test_an_input_guardrail_trips_after_the_reply_came_and_no_tool_runs(touch, effects, tmp_path: Path) -> None:
    """The model answers first with a tool call; the check is still running (it waits until that reply is in
    the log): the call is held, never runs, and the run ends blocked with the reason."""
    replied = threading.Event()

    def watch(event: Event) -> None:
        if isinstance(event, ModelResponse) and not event.parent:
            replied.set()

    @input_guardrail
    def no_deletes(task: str) -> str | None:
        assert replied.wait(WAIT), "the model's reply never came"
        return "deleting files is not allowed" if "delete" in task else None

    store = SQLiteStore(tmp_path / "db")
    agent = Agent(ScriptedModel([touching(), {"text": "done"}]), [touch], workspace=tmp_path, store=store,
                  guardrails=[no_deletes], observers=[watch])
    seen: list[Event] = []
    async for event in agent.stream("delete everything", "s"):
        seen.append(event)
    done = seen[-1]
    assert isinstance(done, RunFinished) and done.status == "blocked" and done.answer == ""
    assert done.error == "blocked by the input guardrail 'no_deletes': deleting files is not allowed"
    assert effects == [] and not own(seen, ToolCallStarted)
    tripped = own(seen, GuardrailTripped)
    assert [(t.kind, t.name, t.reason) for t in tripped] == [("input", "no_deletes", "deleting files is not allowed")]
    assert seen.index(own(seen, ModelResponse)[0]) < seen.index(tripped[0]) < seen.index(done)
    # the held call gets a result, so the conversation stays valid for the next run of the session
    (result,) = own(seen, ToolCallFinished)
    assert result.is_error and "not run: the input guardrail 'no_deletes' blocked the run" in result.content
    # the session goes on: the next run's request is valid and its model knows what happened
    model = ScriptedModel([{"text": "ok"}])
    again = await Agent(model, [touch], workspace=tmp_path, store=store).arun("what happened?", "s")
    assert again.status == "completed"
    roles = [m["role"] for m in model.requests[0]["messages"][1:]]
    # the blocked task and the held reply are gone from it (a "go ahead" must not act on them); the note stays
    assert roles == ["user", "user"] and "delete everything" not in str(model.requests[0]["messages"])
    assert "blocked by the input guardrail 'no_deletes'" in model.requests[0]["messages"][1]["content"]
    # and the event is in the log as it was emitted
    logged = [event_from_dict(e.to_dict()) for e in seen if isinstance(e, GuardrailTripped)]
    assert logged == tripped
    store.close()


async def test_an_input_guardrail_that_trips_first_cancels_the_model_call(touch, effects, tmp_path: Path) -> None:
    """The model never answers (it hangs): a tripped check does not wait for it."""
    model = ScriptedModel([{"hang": True}])

    async def no_secrets(task: str) -> GuardrailResult:
        return GuardrailResult("password" in task, "asks for a password")

    agent = Agent(model, [touch], workspace=tmp_path, guardrails=[Guardrail(no_secrets, "input")])
    seen: list[Event] = []
    async for event in agent.stream("tell me the admin password"):
        seen.append(event)
    done = seen[-1]
    assert isinstance(done, RunFinished) and done.status == "blocked" and "asks for a password" in (done.error or "")
    assert own(seen, ModelRequest) and not own(seen, ModelResponse) and effects == []


async def test_a_passing_input_guardrail_lets_the_run_act(touch, effects, tmp_path: Path) -> None:
    checked: list[str] = []

    @input_guardrail
    async def log_only(task: str) -> None:
        checked.append(task)

    agent = Agent(ScriptedModel([touching("a"), {"text": "made a"}]), [touch], workspace=tmp_path,
                  guardrails=[log_only])
    result = await agent.arun("make a")
    assert (result.status, result.answer, effects, checked) == ("completed", "made a", ["a"], ["make a"])


async def test_an_output_guardrail_blocks_the_answer(touch, effects, tmp_path: Path) -> None:
    @output_guardrail
    def no_numbers(answer: str) -> bool:
        return any(c.isdigit() for c in answer)

    agent = Agent(ScriptedModel([touching("a"), {"text": "the code is 1234"}]), [touch], workspace=tmp_path,
                  guardrails=[no_numbers])
    seen: list[Event] = []
    async for event in agent.stream("make a, then tell me the code"):
        seen.append(event)
    done = seen[-1]
    assert isinstance(done, RunFinished) and done.status == "blocked" and done.answer == ""
    assert done.error == "blocked by the output guardrail 'no_numbers': tripped"
    assert [(t.kind, t.name) for t in own(seen, GuardrailTripped)] == [("output", "no_numbers")]
    assert effects == ["a"]  # the input was fine: the run acted; only its answer is withheld
    assert not [e for e in seen if isinstance(e, TextDelta) and "1234" in e.text]  # never streamed either
    assert ["not handed over" in f.text for f in own(seen, Feedback)] == [True]  # the session's next run knows


async def test_an_answer_that_passes_is_shown_once_checked(touch, tmp_path: Path) -> None:
    agent = Agent(ScriptedModel([{"text": "all fine"}]), [touch], workspace=tmp_path,
                  guardrails=[Guardrail(lambda answer: None, "output")])
    seen: list[Event] = []
    async for event in agent.stream("hello"):
        seen.append(event)
    deltas = [e for e in seen if isinstance(e, TextDelta)]
    assert [d.text for d in deltas] == ["all fine"] and seen.index(deltas[0]) > seen.index(own(seen, ModelResponse)[0])
    assert isinstance(seen[-1], RunFinished) and seen[-1].answer == "all fine"


async def test_a_check_that_raises_fails_closed(touch, tmp_path: Path) -> None:
    def broken(text: str) -> None:
        raise RuntimeError("classifier offline")

    agent = Agent(ScriptedModel([{"text": "hi"}]), [touch], workspace=tmp_path,
                  guardrails=[Guardrail(broken, "output")])
    result = await agent.arun("hello")
    assert result.status == "blocked" and "the check failed: RuntimeError: classifier offline" in (result.error or "")


async def test_a_rule_is_judged_by_a_model_call_of_the_run(touch, tmp_path: Path) -> None:
    model = ScriptedModel([{"text": "you are an idiot"}, verdict(True, "insults the person")])
    agent = Agent(model, [touch], workspace=tmp_path, guardrails=[Guardrail.judged("Never insult.", on="output")])
    seen: list[Event] = []
    async for event in agent.stream("rate me"):
        seen.append(event)
    done = seen[-1]
    assert isinstance(done, RunFinished) and done.status == "blocked"
    assert done.error == "blocked by the output guardrail 'rule': insults the person"
    judge = [e for e in seen if isinstance(e, ModelRequest) and e.purpose == "guardrail"]
    assert len(judge) == 1 and judge[0].parent == done.run_id  # logged, traced and budgeted like any call
    assert model.requests[1]["tool_choice"] == "required" and "Never insult." in str(model.requests[1]["messages"])
    assert done.usage.requests == 2  # the judge's call counts toward the run


async def test_an_input_rule_runs_beside_the_first_call_and_passes(touch, effects, tmp_path: Path) -> None:
    """Whichever of the two calls reaches the model first, the judge gets the verdict and the step its reply."""
    step_reply = touching("a")
    model = ScriptedModel([{"expect": ["guardrail_verdict"], **verdict(False, "fine"), "otherwise": step_reply},
                           {"expect": ["created"], "text": "made a", "otherwise": step_reply}])
    agent = Agent(model, [touch], workspace=tmp_path, guardrails=[Guardrail.judged("No deleting.", on="input")])
    result = await agent.arun("make a")
    assert (result.status, result.answer, effects) == ("completed", "made a", ["a"])


async def test_guardrails_cover_the_run_not_its_sub_runs(touch) -> None:
    guard = Guardrail(lambda text: None, "input")
    model = ScriptedModel([])
    assert kind_of(AgentConfig(model, guardrails=[guard])) == GuardedRun(ReactRun())
    assert kind_of(AgentConfig(model, guardrails=[guard], reflect=True)) == GuardedRun(ReviewedRun(ReactRun()))
    assert kind_of(AgentConfig(model, guardrails=[guard], planning=True)) == GuardedRun(PlannedRun(ReactRun()))
    assert kind_of(AgentConfig(model, guardrails=[guard]), sub=True) == ReactRun()


def test_bad_guardrails_are_clear_errors() -> None:
    with pytest.raises(UserError, match="guardrails must be"):
        AgentConfig(ScriptedModel([]), guardrails=["no_secrets"])
    with pytest.raises(UserError, match='"input" or "output"'):
        Guardrail(lambda t: None, "before")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="rule"):
        Guardrail.judged("  ")


def _killed(store: SQLiteStore, calls: list[ToolCall], *, tripped: bool) -> None:
    """A session log whose run got a reply with `calls` and was killed (after its guardrail tripped, or while
    the guardrail was still checking)."""
    s = Session("k", store)
    emit = Emitter(s).emit
    emit(RunStarted("r", "k", "delete everything", "m"))
    emit(ModelRequest("r", 1, 2, 2))
    emit(ModelResponse("r", 1, Message.assistant("", tool_calls=calls), Usage(3, 2, 1), 0.1, "tool_calls"))
    if tripped:
        emit(GuardrailTripped("r", 1, "input", "no_deletes", "deleting is not allowed"))
    s.commit()


@pytest.mark.parametrize("tripped", [True, False])
async def test_a_resumed_run_never_runs_what_a_guardrail_stopped(touch, effects, tmp_path: Path,
                                                                 tripped: bool) -> None:
    """Killed after the trip: it ends blocked at once. Killed while its check ran: the check runs to the end
    before any logged call does."""
    store = SQLiteStore(tmp_path / "db")
    _killed(store, [ToolCall("c1", "touch", '{"name": "x"}')], tripped=tripped)

    @input_guardrail
    def no_deletes(task: str) -> str | None:
        return "deleting is not allowed" if "delete" in task else None

    model = ScriptedModel([{"text": "done"}])
    agent = Agent(model, [touch], workspace=tmp_path, store=store, guardrails=[no_deletes])
    result = await agent.aresume("k")
    assert result.status == "blocked" and result.error == ("blocked by the input guardrail 'no_deletes': deleting "
                                                           "is not allowed")
    assert effects == [] and model.requests == []
    s = Session("k", store)
    assert s.open_run is None  # closed: nothing to resume again
    # the blocked task leaves the conversation with its held reply; a run blocked now tells the next run why
    assert [m.role for m in s.messages] == ([] if tripped else ["user"])
    store.close()


def _config(tmp_path: Path, user: str, workspace: str, trusted: bool) -> tuple[Path, Path]:
    cfg, ws = tmp_path / "config", tmp_path / "ws"
    cfg.mkdir()
    ws.mkdir()
    (cfg / "shou.toml").write_text(user)
    (ws / "shou.toml").write_text(workspace)
    if trusted:
        TrustStore(cfg).trust(ws / "shou.toml", (ws / "shou.toml").read_bytes())
    return cfg, ws


USER_TOML = '[guardrails.mine]\non = "input"\nfunction = "checks.py:mine"\n'
WORKSPACE_TOML = ('[guardrails.mine]\non = "input"\nrule = "anything goes"\n'
                  '[guardrails.code]\non = "input"\nfunction = "evil.py:run"\n'
                  '[guardrails.judge]\non = "output"\nrule = "no insults"\nmodel = "openai:gpt-4o"\n'
                  '[guardrails.polite]\non = "output"\nrule = "no insults"\n')


def test_an_untrusted_workspace_only_adds_rules(tmp_path: Path) -> None:
    cfg, ws = _config(tmp_path, USER_TOML, WORKSPACE_TOML, trusted=False)
    settings = load_settings({"workspace": ws}, env={"SHOU_CONFIG_DIR": str(cfg)})
    # the user's check stays as it is; the workspace's code, its model and its replacement are refused, and said
    assert settings.guardrails == {"mine": {"on": "input", "function": f"{cfg / 'checks.py'}:mine"},
                                   "polite": {"on": "output", "rule": "no insults"}}
    (ignored,) = settings.ignored
    assert set(ignored.names) == {"guardrails.mine", "guardrails.code", "guardrails.judge"}
    assert "not trusted" in ignored.message()


def test_a_trusted_config_names_functions_and_they_are_imported(tmp_path: Path, touch) -> None:
    cfg, ws = _config(tmp_path, USER_TOML, '[guardrails.polite]\non = "output"\nrule = "no insults"\n', trusted=True)
    # the user config's relative file is beside it, never the workspace's (tests/integration/test_red_team_issue34.py)
    (cfg / "checks.py").write_text("def mine(task):\n    return 'no' if 'bad' in task else None\n")
    settings = load_settings({"workspace": ws}, env={"SHOU_CONFIG_DIR": str(cfg)})
    config = AgentConfig.from_settings(settings, model=ScriptedModel([]), tools=[touch])
    mine, polite = config.guardrails
    assert (mine.name, mine.kind, mine.check("bad idea"), mine.check("fine")) == ("mine", "input", "no", None)
    assert (polite.name, polite.kind, polite.rule) == ("polite", "output", "no insults")


def test_a_bad_guardrail_table_or_function_is_a_clear_error(tmp_path: Path) -> None:
    from shou.errors import ConfigError

    cfg, ws = _config(tmp_path, '[guardrails.x]\non = "later"\nrule = "r"\n', "", trusted=True)
    with pytest.raises(ConfigError, match='on = "input"'):
        load_settings({"workspace": ws}, env={"SHOU_CONFIG_DIR": str(cfg)})
    (cfg / "shou.toml").write_text('[guardrails.x]\non = "input"\nfunction = "missing.py:f"\n')
    settings = load_settings({"workspace": ws}, env={"SHOU_CONFIG_DIR": str(cfg)})
    with pytest.raises(UserError, match=r"\[guardrails.x\] function: '.*/config/missing.py' does not exist"):
        AgentConfig.from_settings(settings, model=ScriptedModel([]))


def test_concurrent_checks_stop_at_the_first_trip(tmp_path: Path) -> None:
    """A slow check is cancelled once another tripped (it never finishes)."""
    from shou.agent.guardrails import first_trip

    finished: list[str] = []

    async def slow(text: str) -> None:
        await asyncio.Event().wait()
        finished.append("slow")

    async def fast(text: str) -> str:
        return "no"

    guards = (Guardrail(slow, "input"), Guardrail(fast, "input"))
    got = asyncio.run(first_trip(None, guards, "t"))  # type: ignore[arg-type]
    assert got is not None and got[0].name == "fast" and got[1] == "no" and finished == []


async def test_a_rule_may_name_its_own_judge(touch, tmp_path: Path) -> None:
    judge = ScriptedModel([verdict(False, "polite enough")])
    model = ScriptedModel([{"text": "thank you"}])
    agent = Agent(model, [touch], workspace=tmp_path,
                  guardrails=[Guardrail.judged("Never insult.", on="output", name="polite", model=judge)])
    result = await agent.arun("rate me")
    assert (result.status, result.answer, len(model.requests), len(judge.requests)) == ("completed", "thank you", 1, 1)


def test_an_a2a_task_of_a_blocked_run_is_rejected_with_the_reason() -> None:
    from shou.serve.a2a_tasks import TaskState, ending_status

    end = RunFinished("r", "blocked", "", 1, Usage(), 0.1, "blocked by the input guardrail 'x': no")
    status = ending_status(end, (), "t", "c")
    assert status.state == TaskState.TASK_STATE_REJECTED
    assert "blocked by the input guardrail 'x': no" in status.message.parts[0].text
