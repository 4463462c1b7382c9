"""A session: a named conversation whose messages are the fold of its events.

Every event reaches a session through its emitter (`shou.agent.emitter`), which appends it to the store
and folds it into the messages (`Session._write`, the emitter's alone). Loading a session replays its
stored events through the same fold, so a conversation continued in another process sees exactly what the first one saw.

The fold also knows whether the last run finished. A run whose process was killed leaves an `OpenRun`:
its task, the last step, and the calls of its last model turn that have no result yet (`started` ones may
have had effects). `shou resume` continues it; starting anything else on the session first closes it
(`Emitter.close_interrupted()`): every unanswered call gets an "interrupted" result, so no request built from
the session can contain a call without its answer.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from .errors import ShouError, UserError
from .events import ApprovalDecided, ApprovalRequested, Event, InputAnswered, InputRequested, ModelRequest
from .folds import (
    ApprovalsFold,
    ConversationFold,
    OpenRun,
    OpenRunFold,
    QuestionsFold,
    RequestsFold,
    ScratchFold,
    SpendingFold,
    tool_messages,
)
from .messages import Message
from .usage import Usage

if TYPE_CHECKING:
    from .folds.forkpoint import ForkPoint
    from .store.sqlite import SessionLock, SQLiteStore

Handler = Callable[[Any], None]
Entry = tuple[int, Callable[[Any, Any], None]]  # the fold's place in `MessageFold._folds`, its class's handler
Table = dict[type, tuple[Entry, ...]]

__all__ = ["INTERRUPTED", "MessageFold", "OpenRun", "Session", "fork_session", "new_session_name", "tool_messages"]

INTERRUPTED = ("Error: interrupted: the process running this call stopped before it finished, so its outcome is "
               "unknown (it may or may not have had its effect). Check before repeating it.")


def new_session_name() -> str:
    """A fresh, sortable session name such as `20261129-204211-3fa27c01b2`.

    Forty random bits: a thousand sessions started in the same second collide once in ~2 billion times (with
    16 bits, almost surely; two runs then shared one conversation, or the second was refused as busy).
    """
    return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(5)


def fork_session(store: Any, source: str, at: str | None = None, name: str | None = None) -> tuple[str, ForkPoint]:
    """Make a new session (`name`, or a fresh one) whose log is `source`'s through step `at` (None: its last
    step; see `shou.folds.forkpoint` for how steps are counted and cut), in `store`. `source` is only read.
    Returns the new session's name and the cut. `UserError` for a source or a step that does not exist, a
    step that is no clean cut, or a name in use."""
    if not store.exists(source):
        raise UserError(f"no session {source!r} (shou sessions lists them)")
    if name is not None and (not name.strip() or name != name.strip()):
        raise UserError(f"{name!r} is no session name: give one without surrounding spaces")
    name = name or new_session_name()
    if name == source:
        raise UserError("a fork needs a name of its own; give another with -s")
    from .folds.forkpoint import fork_point  # here: only a fork reads it, not every run's start

    point = fork_point(store.rows(source), at, source)
    lock = store.lock(name)  # no run starts on the new name while its log is written (SessionBusy)
    try:
        store.fork(source, name, point.through, point.closing, point.status)
    finally:
        lock.release()
    return name, point


class MessageFold:
    """Folds events into the session's state, kept by small folds of one concern each (`shou.folds`): the
    conversation, the open run, spending, approvals, the scratchpad and the requests the log holds.

    Each event goes to the handlers of its type only, looked up in a table built once per process (a fold's
    handlers are its class's methods, the same for every instance): this runs on every event of every run and
    on every session load, and every in-flight session would otherwise hold two tables of bound methods (issue
    35: ~4 KiB of a parked one). A sub-run's events (`parent` set) have their own context: only spending, the
    requests and the open run's `subs` and `usage` read them.
    """

    __slots__ = ("_folds", "approvals", "conversation", "questions", "requests", "run", "scratch", "spending")
    _tables: ClassVar[tuple[Table, Table] | None] = None  # (a run's own events, a sub-run's)

    def __init__(self) -> None:
        self.requests = RequestsFold()
        self.spending = SpendingFold()
        self.scratch = ScratchFold()
        self.approvals = ApprovalsFold()
        self.questions = QuestionsFold()
        self.run = OpenRunFold()
        self.conversation = ConversationFold(self.run)
        # Order matters: the conversation reads the open run before it records the run's end.
        self._folds = (self.requests, self.spending, self.scratch, self.approvals, self.questions, self.conversation,
                       self.run)
        if MessageFold._tables is None:
            MessageFold._tables = _tables(self._folds, self.run.on_sub)

    def apply(self, event: Event) -> None:
        """Update the state with one event."""
        own, sub = self._tables  # type: ignore[misc]  # set by the first __init__
        table = sub if event.parent else own
        handlers = table.get(type(event))
        if handlers is None:  # a type no fold handles, or a subclass of one: gets its nearest base's handlers
            base = next(k for k in type(event).__mro__ if k in table)  # Event is always there
            handlers = table[type(event)] = table[base]
        folds = self._folds
        for i, handle in handlers:
            handle(folds[i], event)

    @property
    def messages(self) -> list[Message]:
        """The conversation so far."""
        return self.conversation.messages

    @property
    def open_run(self) -> OpenRun | None:
        """The run not finished yet, if any."""
        return self.run.run


def _tables(folds: tuple[Any, ...], on_sub: Handler) -> tuple[Table, Table]:
    """The tables of `MessageFold.apply`, from one instance's `folds` (in their order) and the open run's `on_sub`
    (which takes every sub-run event, after spending's and the requests')."""
    where = {id(fold): i for i, fold in enumerate(folds)}

    def unbound(handle: Handler) -> tuple[int, Callable[[Any, Any], None]]:
        return where[id(handle.__self__)], handle.__func__  # type: ignore[attr-defined]

    own = [{kind: unbound(handle) for kind, handle in fold.handlers().items()} for fold in folds]
    return _table(own, ()), _table(own[:2], (unbound(on_sub),))


def _table(folds: list[dict[type, Entry]], last: tuple[Entry, ...]) -> Table:
    """Event type -> the handlers that want it, in the folds' order, then `last` (which takes every type).

    Only the types some fold handles, and `Event`, are entered: another type gets `Event`'s entry (`last` alone)
    the first time one comes (`MessageFold.apply`)."""
    table: Table = {Event: ()}
    for handlers in folds:
        for kind, handle in handlers.items():
            table[kind] = (*table.get(kind, ()), handle)
    return {kind: (*handlers, *last) for kind, handlers in table.items()}


class Session:
    """A named conversation, optionally persisted to a `SQLiteStore`."""

    def __init__(self, name: str | None = None, store: SQLiteStore | None = None) -> None:
        self.name = name or new_session_name()
        # What the session's live resources are kept under (ToolContext.session_key). The name serves one
        # person's own log; `shou serve` sets the id it gave the session when it was made, since a name can
        # be chosen again after a delete, by anyone.
        self.key = self.name
        self.store = store
        self._fold = MessageFold()
        self._seen = 0  # the id of the last stored event folded in
        self._lock: SessionLock | None = None
        self._token = secrets.token_hex(8)  # tells this object's rows apart from other writers'
        self._fresh = not name  # a name made up just now: nothing can be stored under it yet
        if name:
            self.refresh()

    @property
    def messages(self) -> list[Message]:
        """The conversation so far (user, assistant and tool messages; no system prompt)."""
        return self._fold.conversation.messages

    @property
    def summary(self) -> str:
        """The summary standing for the first `summary_upto` messages ("" before any compaction)."""
        return self._fold.conversation.summary

    @property
    def summary_upto(self) -> int:
        """How many of the first messages the summary replaces in the context."""
        return self._fold.conversation.summary_upto

    @property
    def trace_keys(self) -> set[str]:
        """Hashes of the request contents this session's log holds (the trace stores each one once)."""
        return self._fold.requests.trace_keys

    @property
    def spent(self) -> Usage:
        """What every model call of the session used and cost so far (for session budgets)."""
        return self._fold.spending.spent

    @property
    def loaded_skills(self) -> dict[str, str]:
        """Skills loaded with `use_skill` in this session, name -> body (the system prompt keeps them)."""
        return self._fold.scratch.loaded_skills

    @property
    def working_memory(self) -> str:
        """The agent's scratchpad for this session."""
        return self._fold.scratch.working_memory

    @property
    def pending_approvals(self) -> dict[str, ApprovalRequested]:
        """Calls waiting for a person's decision, by call id."""
        return self._fold.approvals.requested

    @property
    def pending_questions(self) -> dict[str, InputRequested]:
        """Questions to the person (`ask_user`) waiting for an answer, by call id."""
        return self._fold.questions.asked

    @property
    def answers(self) -> dict[str, InputAnswered]:
        """Answers given to questions whose calls have no result yet, by call id."""
        return self._fold.questions.answers

    @property
    def decisions(self) -> dict[str, ApprovalDecided]:
        """Every approval decision of the session, by call id."""
        return self._fold.approvals.decisions

    @property
    def granted(self) -> list[ApprovalDecided]:
        """The decisions that allowed a rule for the rest of this session."""
        return self._fold.approvals.granted

    @property
    def open_run(self) -> OpenRun | None:
        """The run the log shows started and not finished (killed, or running in another process)."""
        return self._fold.run.run

    def refresh(self) -> None:
        """Fold in what other processes stored since this session was loaded."""
        if self.store is not None:
            # Our own rows were folded in when they were recorded: only other writers' are new.
            for row_id, event in self.store.rows(self.name, self._seen, self._token):
                self._fold.apply(event)
                self._seen = row_id

    def _write(self, event: Event, data: bytes | None = None) -> None:
        """Append `event` to the store (durable at the next `commit()`), then fold it in. The emitter's alone
        (`shou.agent.emitter`): every event is redacted and observed on its way here. `data` is the event's JSON
        when the emitter made it already."""
        if self.store is not None:
            self.store.append(self.name, event, self._token, data)
        self._fold.apply(event)

    def commit(self) -> None:
        """Make every recorded event durable. Raises (`SessionLost`) when this process no longer holds the session:
        its events are no longer written, so what the caller was about to do must not happen."""
        if self.store is not None:
            self.store.commit()
            self._check_held()

    async def commit_together(self) -> None:
        """`commit()`, in one transaction with the other runs in flight on the store that commit in the same
        turn of the event loop (store/together.py); at once when there are none."""
        store = self.store
        if store is not None:
            together = getattr(store, "together", None)
            if together is None:
                store.commit()
            else:
                await together.commit()
            self._check_held()

    flush = commit

    def _check_held(self) -> None:
        """`SessionLost` when the session's lock went with a broken connection (PostgreSQL) while it was held:
        the store then leaves its rows out of every commit, one that succeeds too, so its run must not act as
        if they were written."""
        lock = self._lock
        if lock is not None and lock.lost:
            lock.check()

    # ------------------------------------------------------------------ one process at a time

    @property
    def locked(self) -> bool:
        """Whether this process holds the session."""
        return self._lock is not None

    def acquire(self) -> None:
        """Take the session for this process (`SessionBusy` if another one has it), then catch up with
        what was stored before we had it."""
        if self.store is not None and self._lock is None:
            self._lock = self.store.lock(self.name)
            if not self._fresh:
                self.refresh()
            self._fresh = False

    def release(self) -> None:
        """Let other processes run the session. What of it could not be committed while it was held (the store
        failed, and its run stopped) is given up, as a kill gives it up: written by a later commit of the store,
        it would land behind the back of whoever runs the session next."""
        if self._lock is not None:
            lock, self._lock = self._lock, None
            store = self.store
            dropped = lock.lost  # its rows were left out of the commits since the lock went
            if store is not None and store.pending:
                dropped = bool(store.abandon(self.name)) or dropped
                store.restore(self.name)
            lock.release()
            if dropped:
                self._reload()

    def _reload(self) -> None:
        """Fold the session again from its log alone: events it recorded were given up (`release()`), and a
        run that uses this object again must not build on them (its requests would name messages, and contents
        by hash, that the log does not hold)."""
        self._fold = MessageFold()
        self._seen = 0
        self._token = secrets.token_hex(8)  # every stored row is now one to fold in: none is this object's own
        self._fresh = False
        # the store may be away (why the rows were given up): the next acquire() reads on from where this stopped
        with contextlib.suppress(ShouError):
            self.refresh()

    def unanswered_requests(self) -> list[ModelRequest]:
        """The model requests of the open run (and of its sub-runs) that a killed process made and never logged
        an answer or a failure for: the provider may have billed them."""
        run = self._fold.run.run
        if run is None:
            return []
        prefix = run.run_id + "."
        return [r for rid, r in self._fold.requests.asked.items() if rid == run.run_id or rid.startswith(prefix)]
