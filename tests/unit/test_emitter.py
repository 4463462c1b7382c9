"""The one emitter: every event, from every face and side path, is redacted, logged, observed, then handed on.

Each former side channel gets a test: a known secret reaching it is absent from the log and from OTel spans
(the in-memory exporter), and the observers see its events. Real SQLite, the scripted model.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shou import Agent, tool
from shou.agent.approvals import ApprovalRequest
from shou.agent.emitter import Emitter
from shou.events import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    HistoryCleared,
    ModelRequest,
    ModelResponse,
    Notice,
    RunFinished,
    RunStarted,
    TextDelta,
    ToolCallFinished,
)
from shou.mcp.servers import ServerSpec
from shou.messages import Message, ToolCall
from shou.models.scripted import ScriptedModel
from shou.observe.otel import OtelObserver
from shou.redact import Redactor
from shou.serve.openai_api import seed_history
from shou.serve.runner import Runner
from shou.session import Session
from shou.store.sqlite import SQLiteStore
from shou.usage import Usage

SECRET = "sk-live-Zq8x7Wv6Ut5Sr4"
SRC = Path(__file__).resolve().parents[2] / "src" / "shou"


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def log_text(path: Path, after: int = 0) -> str:
    """The log's rows (after the first `after`), one a line."""
    import sqlite3

    with sqlite3.connect(path) as db:
        rows = [r[0] for r in db.execute("SELECT data FROM events ORDER BY id")]
    return "\n".join(rows[after:])


def span_text(exporter: InMemorySpanExporter) -> str:
    return "\n".join(f"{s.name} {dict(s.attributes or {})} {[e.attributes for e in s.events]}"
                     for s in exporter.get_finished_spans())


def mcp_agent(tmp_path: Path, provider: TracerProvider, seen: list[Event], **kw: object) -> Agent:
    """An agent whose MCP server's URL holds SECRET (a secret source), observed by OTel and by `seen`."""
    servers = {"docs": ServerSpec("docs", url=f"https://bot:{SECRET}@mcp.example.invalid/mcp")}
    return Agent(ScriptedModel([{"text": "ok"}]), [], workspace=tmp_path, store=SQLiteStore(tmp_path / "s.db"),
                 mcp_servers=servers, observers=[OtelObserver(tracer_provider=provider, content=True), seen.append],
                 **kw)


def planted(tmp_path: Path) -> Session:
    """A session a process that did not know SECRET left with a run open: a request never answered, a call
    never finished (a log written before the secret was configured)."""
    store = SQLiteStore(tmp_path / "s.db")
    s = Session("planted", store)
    emit = Emitter(s).emit
    emit(RunStarted("run_a", s.name, f"use {SECRET}", f"openai:gpt-{SECRET}"))
    emit(ModelResponse("run_a", 1, Message.assistant("", (ToolCall("c1", f"tool_{SECRET}", "{}"),)), Usage(), 0.1))
    emit(ModelRequest("run_a.1", 1, 3, 0, 40, "mc_2", f"gpt-{SECRET}", "openai", parent="run_a"))  # a review
    s.commit()
    store.close()
    return Session("planted", SQLiteStore(tmp_path / "s.db"))


def test_the_unanswered_notice_and_the_closing_of_a_killed_run_pass_the_emitter(tmp_path: Path, spans) -> None:
    provider, exporter = spans
    session = planted(tmp_path)
    seen: list[Event] = []
    agent = Agent(ScriptedModel([{"text": "done"}]), [], workspace=tmp_path, store=session.store,
                  observers=[OtelObserver(tracer_provider=provider, content=True), seen.append])
    agent.redactor = Redactor([SECRET])  # this process knows the secret (a key set since)
    before = len(log_text(tmp_path / "s.db").split("\n"))
    result = agent.run("next task", session)
    assert result.status == "completed"
    kinds = [(type(e).__name__, getattr(e, "kind", getattr(e, "status", ""))) for e in seen]
    assert ("Notice", "unanswered") in kinds and ("RunFinished", "interrupted") in kinds
    assert ("ToolCallFinished", "") in kinds[:kinds.index(("RunFinished", "interrupted"))]
    new_rows = log_text(tmp_path / "s.db", before)  # what this process wrote
    assert "unanswered" in new_rows and "interrupted" in new_rows and "[redacted]" in new_rows
    assert SECRET not in new_rows and SECRET not in str(seen)
    assert "execute_tool tool_[redacted]" in span_text(exporter)  # the closed call, as OTel saw it
    assert SECRET not in span_text(exporter)


def test_clearing_the_history_is_an_observed_event(tmp_path: Path, spans) -> None:
    provider, _ = spans
    seen: list[Event] = []
    agent = mcp_agent(tmp_path, provider, seen)
    session = agent.session("chat")
    agent.emitter(session).clear()
    assert [type(e) for e in seen] == [HistoryCleared]
    assert "history_cleared" in log_text(tmp_path / "s.db")


def test_the_serve_cancel_path_is_redacted_and_observed(tmp_path: Path, spans) -> None:
    provider, exporter = spans
    session = planted(tmp_path)
    seen: list[Event] = []
    agent = mcp_agent(tmp_path, provider, seen)
    runner = Runner(agent, session.store, None, None)  # type: ignore[arg-type]  # the cancel path needs neither
    session.acquire()
    runner._close_cancelled(session, session.open_run)
    session.release()
    ends = [e for e in seen if isinstance(e, ToolCallFinished | RunFinished)]
    assert [type(e) for e in ends] == [ToolCallFinished, RunFinished] and ends[1].status == "cancelled"
    assert SECRET not in ends[0].name and "[redacted]" in ends[0].name
    written = log_text(tmp_path / "s.db", 3)
    assert SECRET not in written and "cancelled" in written
    assert SECRET not in span_text(exporter)


def test_the_openai_endpoints_history_is_redacted_and_observed(tmp_path: Path, spans) -> None:
    provider, exporter = spans
    seen: list[Event] = []
    agent = mcp_agent(tmp_path, provider, seen)
    session = Session("oai", agent.store)
    seed_history(session, [("user", f"my key is {SECRET}"), ("assistant", f"noted: {SECRET}")], "shou", agent)
    assert [type(e) for e in seen] == [RunStarted, ModelResponse, RunFinished]
    assert SECRET not in log_text(tmp_path / "s.db") and "[redacted]" in log_text(tmp_path / "s.db")
    assert SECRET not in span_text(exporter) and "invoke_agent shou" in span_text(exporter)
    assert session.messages[0].text == "my key is [redacted]"


async def test_an_interactive_approval_logs_its_request_then_its_decision(tmp_path: Path) -> None:
    @tool(approval="ask")
    def deploy(target: str) -> str:
        """Deploy somewhere.

        Args:
            target: where
        """
        return f"deployed to {target}"

    order: list[str] = []

    async def person(request: ApprovalRequest) -> str:
        order.append("asked")
        return "yes"

    model = ScriptedModel([{"tool_calls": [{"name": "deploy", "arguments": {"target": "prod"}}]}, {"text": "done"}])
    agent = Agent(model, [deploy], workspace=tmp_path, store=SQLiteStore(tmp_path / "s.db"), approvals=person,
                  observers=[lambda e: order.append(type(e).__name__) if "Approval" in type(e).__name__ else None])
    events = [e async for e in agent.stream("deploy it")]
    assert order == ["ApprovalRequested", "asked", "ApprovalDecided"]
    requested = next(e for e in events if isinstance(e, ApprovalRequested))
    decided = next(e for e in events if isinstance(e, ApprovalDecided))
    assert requested.call.id == decided.call_id and decided.allow
    assert "approval_requested" in log_text(tmp_path / "s.db")
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"


def test_a_secret_split_across_two_deltas_never_reaches_the_consumer(tmp_path: Path) -> None:
    got: list[Event] = []
    emitter = Emitter(Session("s", None), Redactor([SECRET]), consumer=got.append)
    emitter.emit(TextDelta("r", 1, f"the key: {SECRET[:9]}"))
    emitter.emit(TextDelta("r", 1, f"{SECRET[9:]} and more"))
    emitter.emit(ModelResponse("r", 1, Message.assistant(f"the key: {SECRET} and more"), Usage(), 0.1))
    text = "".join(e.text for e in got if isinstance(e, TextDelta))
    assert SECRET not in text and SECRET[:9] not in text and text == "the key: [redacted] and more"
    assert isinstance(got[-1], ModelResponse)  # what was held back came out before it, in order


async def test_a_streamed_secret_split_across_chunks_is_redacted_by_the_run(tmp_path: Path) -> None:
    model = ScriptedModel([{"text": f"here: {SECRET} end", "chunk_size": 5}])
    agent = Agent(model, [], workspace=tmp_path)
    agent.redactor = Redactor([SECRET])
    deltas = [e.text async for e in agent.stream("say it") if isinstance(e, TextDelta)]
    assert len(deltas) > 2 and "".join(deltas) == "here: [redacted] end"
    assert not any(SECRET[:5] in d for d in deltas)


def test_an_observers_event_joins_the_stream_after_its_cause_and_its_failure_is_not_fatal() -> None:
    got: list[Event] = []

    def alert(event: Event) -> Event | None:
        return Notice(event.run_id, 0, "alert", f"saw {SECRET}") if isinstance(event, RunStarted) else None

    def broken(event: Event) -> None:
        raise RuntimeError("observer bug")

    session = Session("s", None)
    Emitter(session, Redactor([SECRET]), [broken, alert], got.append).emit(RunStarted("r", "s", "t", "m"))
    assert [type(e) for e in got] == [RunStarted, Notice] and got[1].text == "saw [redacted]"


def test_no_module_but_the_emitter_writes_a_session_log() -> None:
    """`Session._write` and the store's `append` are called from the emitter (and the session) alone."""
    writers = []
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("_write", "record", "append") and _is_log_write(node):
                writers.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert sorted(set(w.split(":")[0] for w in writers)) == ["agent/emitter.py", "session.py"], writers


def _is_log_write(node: ast.Call) -> bool:
    func = node.func
    assert isinstance(func, ast.Attribute)
    target = ast.unparse(func.value)
    if func.attr == "_write":
        return "session" in target
    if func.attr == "record":
        return "session" in target or target == "s"
    return target.endswith("store") and len(node.args) >= 2  # store.append(session, event, ...)
