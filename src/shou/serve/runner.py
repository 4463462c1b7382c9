"""The runs of one `shou serve` replica: taking them from the queue, executing them, keeping their leases.

A run asked for on this replica is held by it at once when it has room (so its text streams live from
here); otherwise it waits in the queue for whichever replica has room first. A heartbeat renews the leases
of the runs this replica holds and picks up cancel requests made on any replica. When a replica dies its
leases run out and another takes its runs: the event log says where each got to, and the agent's resume
continues it (finished tool calls are never run again). Session locks (file locks on SQLite, advisory
locks on PostgreSQL, both dropped by the kernel or server when the process dies) keep two replicas from
ever running one session at once, even if a lease runs out under a replica that is still alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from dataclasses import replace
from typing import Any

from ..agent.agent import Agent
from ..agent.config import narrow
from ..agent.loop import new_run_id
from ..agent.output import JsonSchema
from ..events import Event, RunFinished, ToolCallFinished
from ..session import Session
from ..store.locks import SessionBusy
from ..store.sqlite import NOT_STORED
from ..trace import usage_json
from ..usage import Usage
from .hub import Hub
from .jobs import Job, RunQueue
from .tenancy import UserMemory, tightened

log = logging.getLogger("shou.serve")
CANCELLED = "Error: not run: the run was cancelled before this call was decided."


class Runner:
    """Executes runs for this replica (`replica` names it in the queue)."""

    def __init__(self, agent: Agent, store: Any, queue: RunQueue, hub: Hub, *, replica: str = "",
                 max_concurrent: int = 64, lease: float = 15.0, max_runs_per_user: int | None = None,
                 poll: float = 0.5, users: UserMemory | None = None) -> None:
        self.agent = agent
        self.store = store
        self.queue = queue
        self.hub = hub
        self.replica = replica or secrets.token_hex(6)
        self.max_concurrent = max_concurrent
        self.lease = lease
        self.max_runs_per_user = max_runs_per_user
        self.poll = poll
        self.active: dict[str, asyncio.Task[None]] = {}
        self._cancelling: set[str] = set()
        self._sessions: dict[str, str] = {}  # run id -> session, for the runs this replica executes
        self._abandoned: set[str] = set()  # runs stopped because another replica holds them now
        self._kick = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._handing_over = False
        self._seen_waiting: dict[str, int] = {}
        self.users = users

    async def start(self) -> None:
        """Start taking runs and renewing leases."""
        self._loops = [asyncio.create_task(self._claim_loop()), asyncio.create_task(self._heartbeat())]
        url = getattr(self.store, "url", None)
        if url:
            from ..store.postgres import NOTIFY_CHANNEL

            self._loops.append(asyncio.create_task(self.hub.listen(url, NOTIFY_CHANNEL)))

    async def stop(self, drain: float = 10.0) -> None:
        """Stop taking runs and give the running ones `drain` seconds to finish; then hand the rest over as a
        kill would, without its wait: nothing more is written, and their leases end now, so another replica
        resumes them from the log at once (a rolling restart loses no run)."""
        claim, *others = self._loops
        claim.cancel()
        if self.active:
            await asyncio.wait(list(self.active.values()), timeout=drain)
        if self.active:
            self._handing_over = True
            self.store.freeze()
            try:
                self.queue.hand_over(self.replica, list(self.active))
            except Exception as e:  # the database is away: their leases run out instead
                log.warning("handing runs over failed: %s", e)
        for task in [*others, *self.active.values()]:
            task.cancel()
        await asyncio.gather(*self._loops, *self.active.values(), return_exceptions=True)

    # ------------------------------------------------------------------ asking

    def submit(self, user: str, session: str, task: str, options: dict[str, Any]) -> Job:
        """Queue a run for `user` (`Refused` when the queue turns it down); held here at once if there is room."""
        local = len(self.active) < self.max_concurrent
        job = self.queue.submit(new_run_id(), user, session, task, options, replica=self.replica if local else "",
                                lease=self.lease, max_active=self.max_runs_per_user)
        if local:
            self._spawn(job)
        else:
            self._kick.set()
        return job

    def cancel(self, job: Job) -> Job | None:
        """Ask for `job` to stop, wherever it runs."""
        updated = self.queue.cancel(job.run_id)
        if job.run_id in self.active:
            self._stop(job.run_id)
        else:
            self._kick.set()  # a waiting run was queued again to be closed
        return updated

    def resume(self, run_id: str) -> None:
        """Queue a run that waited for approvals (or an answer) again."""
        self.queue.requeue(run_id)
        self._kick.set()

    # ------------------------------------------------------------------ loops

    def _spawn(self, job: Job) -> None:
        task = asyncio.create_task(self._execute(job))
        self.active[job.run_id] = task

        def done(_: asyncio.Task[None]) -> None:
            self.active.pop(job.run_id, None)
            self._cancelling.discard(job.run_id)
            self._kick.set()

        task.add_done_callback(done)

    async def _claim_loop(self) -> None:
        while True:
            job = None
            if len(self.active) < self.max_concurrent:
                try:
                    job = self.queue.claim(self.replica, self.lease)
                except Exception as e:  # the database is away: try again shortly
                    log.warning("claiming a run failed: %s", e)
                    await asyncio.sleep(1.0)
            if job is not None and job.run_id not in self.active:
                self._spawn(job)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), self.poll)
            self._kick.clear()

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.lease / 3)
            try:  # first: a session lock gone with its connection means another replica may run it now
                lost = self.store.lost()
            except Exception as e:
                log.warning("checking session locks failed: %s", e)
                lost = set()
            for run_id, session in list(self._sessions.items()):
                if session in lost:
                    self._abandon(run_id, "its session's lock went with a broken connection")
            try:
                started = list(self._sessions)  # runs past taking their session (those a lease may be lost on)
                held = self.queue.renew(self.replica, list(self.active), self.lease)
                for run_id in started:
                    if run_id not in held and run_id in self._sessions:
                        self._abandon(run_id, "its lease ran out and another replica took it")
                    elif held.get(run_id):
                        self._stop(run_id)
                self._unstick()
            except Exception as e:
                log.warning("renewing leases failed: %s", e)

    def _abandon(self, run_id: str, why: str) -> None:
        """Stop a run this replica no longer holds, writing nothing more of it: its new holder goes on."""
        session = self._sessions.get(run_id)
        if session is None or run_id in self._abandoned:
            return
        log.error("run %s: %s; stopping it here without writing", run_id, why)
        self._abandoned.add(run_id)
        self.store.abandon(session)
        task = self.active.get(run_id)
        if task is not None:
            task.cancel()

    def _unstick(self) -> None:
        """Queue again a run still waiting for approvals none of which is pending (the replica that recorded
        the last decision died before it queued the run)."""
        for job, updated in self.queue.waiting(older_than=self.lease):
            if self._seen_waiting.get(job.run_id) == updated:
                continue  # nothing happened in its session since it was last looked at
            self._seen_waiting[job.run_id] = updated
            if len(self._seen_waiting) > 10_000:
                self._seen_waiting.clear()
            session = Session(job.session, self.store)
            run = session.open_run
            if run is not None and run.waiting and not session.pending_approvals and not session.pending_questions:
                self.resume(job.run_id)
            elif run is None:  # its end is logged (cancelled from the CLI, closed by another task)
                end = self.logged_end(job)
                if end is not None:
                    self.queue.close_waiting(job.run_id, end.status, end.answer, end.error or "",
                                             usage_json(end.usage))

    def _stop(self, run_id: str) -> None:
        task = self.active.get(run_id)
        if task is not None and run_id not in self._cancelling:
            self._cancelling.add(run_id)
            task.cancel()

    # ------------------------------------------------------------------ one run

    def allows_code(self) -> bool:
        """Whether runs may ask for code mode: only where the operator offers running code (`run_code`) and
        its policy lets it run without asking (code mode's calls are judged as `run_code` too)."""
        if self.agent.code_mode:
            return True
        from ..permissions import Policy

        policy = self.agent.policy if self.agent.policy is not None else Policy.from_settings(self.agent.settings)
        return "run_code" in self.agent.tools.names and policy.decide("run_code", {"code": "1"}).outcome == "allow"

    def agent_for(self, options: dict[str, Any], user: str = "") -> Agent:
        """This replica's agent with a run's options applied, for `user` (their memory)."""
        base = self.agent.config
        config = base
        if options.get("agent") in base.agents:  # an agent named as the model of an OpenAI-style request
            from ..agent.delegate import child_config

            config = narrow(child_config(base, base.agents[options["agent"]]), max_steps=base.max_steps)
        config = tightened(config, options)
        changes: dict[str, Any] = {"planning": bool(options.get("plan", config.planning)),
                                   "reflect": bool(options.get("reflect", config.reflect))}
        if options.get("code") and not config.code_mode and self.allows_code():
            changes["code_mode"] = True
        if self.users is not None:
            changes.update(self.users.fields(user))
        if options.get("output_schema"):  # a typed answer: it narrows what an answer may be, never what a run may do
            changes["output_type"] = JsonSchema(options["output_schema"])
        if options.get("instructions"):  # the system messages of an OpenAI-style request: the caller's own words
            changes["instructions"] = f"{config.instructions}\n\n{options['instructions']}"
        if options.get("checked_input"):  # what else of the caller's the input guardrails check with the task
            changes["checked_input"] = str(options["checked_input"])
        config = replace(config, **changes)
        if config.planning:  # each step a loop of its own: no step may take more than the run's limit
            config = narrow(config, plan_step_max_steps=config.max_steps)
        return self.agent.variant(config)

    async def _execute(self, job: Job) -> None:
        try:
            session = Session(job.session, self.store)
            session.key = self.queue.session_id(job.session) or session.key
            session.acquire()
        except Exception as e:  # busy (its previous holder may be dying) or the database is away: later
            if not isinstance(e, SessionBusy):
                log.warning("run %s could not start: %s", job.run_id, e)
            with contextlib.suppress(Exception):
                self.queue.release(job.run_id, self.replica, retry_in=1.0 if isinstance(e, SessionBusy) else 3.0)
            return
        self._sessions[job.run_id] = job.session
        try:
            await self._carry_out(job, session)
        except asyncio.CancelledError:
            if job.run_id in self._abandoned:
                return  # another replica holds it: nothing of this end is recorded
            if self._handing_over or job.run_id not in self._cancelling:
                raise  # the server is stopping: another replica resumes it
            self.queue.finish(job.run_id, self.replica, "cancelled", error="cancelled")
        except Exception as e:
            from ..store.pg_link import is_connection_error

            if is_connection_error(e):  # the end could not be recorded: the lease runs out, the log says how
                # What was not written is given up by `session.release()` below, as a kill leaves it.
                log.warning("run %s: the store failed (%s); it is resumed from its log when its lease runs out",
                            job.run_id, e)
            else:
                log.exception("run %s failed", job.run_id)
                with contextlib.suppress(Exception):
                    self.queue.finish(job.run_id, self.replica, "failed", error=f"{type(e).__name__}: {e}")
        finally:
            self._sessions.pop(job.run_id, None)
            session.release()
            if job.run_id in self._abandoned:
                self._abandoned.discard(job.run_id)
                self.store.restore(job.session)
            self.store.committed.pop(job.session, None)
            self.hub.notify(job.session)

    async def _carry_out(self, job: Job, session: Session) -> None:
        open_run = session.open_run
        ours = open_run is not None and open_run.run_id == job.run_id
        if not ours:
            ended = self.logged_end(job)
            if ended is not None or job.cancel:
                # It ended already (its replica died before saying so), or never started and was cancelled.
                end = ended or RunFinished(job.run_id, "cancelled", "", 0, Usage(), 0.0, "cancelled before it started")
                self._record_end(job, end)
                return
        if job.cancel:
            assert open_run is not None
            self._close_cancelled(session, open_run)
            self._record_end(job, self.logged_end(job))
            return
        agent = self.agent_for(job.options, job.user)
        events = agent.stream_resume(session) if ours else agent.stream(job.task, session, run_id=job.run_id)
        final: RunFinished | None = None
        async for event in events:
            self._publish(job.session, event)
            if isinstance(event, RunFinished) and not event.parent and event.run_id == job.run_id:
                final = event
        self._record_end(job, final)

    def _publish(self, session: str, event: Event) -> None:
        if event.type in NOT_STORED:
            self.hub.fragment(session, event)
        else:  # committed before it was handed on
            self.hub.stored(session, self.store.committed.get(session))

    def logged_end(self, job: Job) -> RunFinished | None:
        """The end of run `job` as its session's log has it (None: not ended there)."""
        ends = [e for _, e in self.store.run_end(job.session, job.run_id)
                if isinstance(e, RunFinished) and e.run_id == job.run_id and not e.parent]
        return ends[-1] if ends else None

    def _record_end(self, job: Job, end: RunFinished | None) -> None:
        if end is None:
            self.queue.finish(job.run_id, self.replica, "failed", error="the run ended without a result")
            return
        self.queue.finish(job.run_id, self.replica, end.status, end.answer, end.error or "", usage_json(end.usage))

    def _close_cancelled(self, session: Session, run: Any) -> None:
        # Through the agent's emitter like any run's events: redacted, and seen by its observers (OTel, alerts).
        emitter = self.agent.emitter(session)
        for call in run.unanswered:
            emitter.emit(ToolCallFinished(run.run_id, run.step, call.id, call.name, CANCELLED, is_error=True))
        emitter.emit(RunFinished(run.run_id, "cancelled", "", run.step, run.usage, 0.0, "cancelled"))
        emitter.commit()

