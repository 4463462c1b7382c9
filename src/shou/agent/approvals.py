"""The gate every tool call passes before it runs: the permission policy, then, for an `ask`, a person.

How an `ask` is answered is the agent's `approvals`:
- an `Approver` (the terminal prompt of `shou run`/`shou chat`): a person says yes, no, yes for the rest of
  the session, or always (a rule written to their config);
- `"yes"` (`--yes`): allowed; `"deny"` (no terminal, no `--yes`): refused, and the model is told why;
- `"defer"`: the call waits (`ApprovalRequested`), the run stops `waiting_approval`, and `shou approve` /
  `shou deny` decide it later, from any process; `shou resume` then runs or refuses it.

Every decision is an event of the session (`ApprovalDecided`: who, what, when), recorded before the call
runs, so a resumed run never asks twice and never runs a refused call. An allow counts only when it
carries an HMAC made with the user's own key (`approvals.key` in their config folder): the session log
lives in the workspace, and a repository could ship one that "approves" its own calls.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..events import ApprovalDecided, ApprovalRequested, ToolCallFinished
from ..messages import ToolCall
from ..permissions import Decision, Policy, Rule, main_argument
from ..tools.executor import parse_arguments

if TYPE_CHECKING:
    from .emitter import Emitter
    from .loop import Run

__all__ = ["Answer", "ApprovalRequest", "Approver", "Gate", "save_rule"]

Answer = Literal["yes", "no", "session", "always"]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What a person is asked about: the call, in full, and why it asks."""

    tool: str
    arguments: dict[str, Any]
    why: str
    rule: str  # the narrow rule "session"/"always" would allow
    call_id: str


Approver = Callable[[ApprovalRequest], Awaitable[Answer]]


def person() -> str:
    """Who is deciding, as recorded: `user:NAME`."""
    try:
        return f"user:{getpass.getuser()}"
    except Exception:  # no name for this uid (a container): still a person at this terminal
        return "user:?"


class Gate:
    """Screens the calls of one model turn for one run."""

    def __init__(self, run: Run) -> None:
        self.run = run
        agent = run.agent
        self.policy: Policy = agent.policy if agent.policy is not None else Policy.from_settings(agent.settings)
        self.approvals = agent.approvals

    async def screen(self, calls: list[ToolCall]) -> tuple[list[ToolCall], list[ToolCall]]:
        """The calls that may run now, and those that wait for a decision (`defer`); every refused call has
        been answered with the reason."""
        runnable: list[ToolCall] = []
        waiting: list[ToolCall] = []
        for call in calls:
            verdict = await self._verdict(call)
            if verdict == "run":
                runnable.append(call)
            elif verdict == "wait":
                waiting.append(call)
        return runnable, waiting

    async def _verdict(self, call: ToolCall) -> Literal["run", "wait", "refused"]:
        run, session = self.run, self.run.session
        tool = run.agent.tools.get(call.name)
        args, problem = parse_arguments(call.arguments)
        if tool is None or problem is not None or not isinstance(args, dict):
            return "run"  # the executor answers unknown tools and broken arguments, as before
        env = getattr(run.agent.settings, "env", None)
        decided = session.decisions.get(call.id)
        if decided is not None and (decided.run_id, decided.step) != (run.run_id, run.step):
            decided = None  # a decision on an older call that had the same id (some servers reuse ids)
        where = bound_to(run.agent.workspace, session.key) if decided is not None or session.granted else ""
        if decided is not None and decided.allow and not verify(decided, where, call.arguments, env):
            decided = None  # not made by this user (a planted session log): decide again
        if decided is not None:  # decided earlier (another process, or before a restart)
            return "run" if decided.allow else self._refuse(call, f"{decided.by} said no ({decided.reason})"
                                                            if decided.by.startswith("user:") else decided.reason)
        granted = [Rule.parse(g.rule) for g in session.granted if verify(g, where, "", env)]
        order = list((tool.parameters.get("properties") or {}).keys())
        workspace = str(run.agent.workspace)
        decision = self.policy.decide(call.name, args, declared=getattr(tool, "approval", None), granted=granted,
                                      order=order, workspace=workspace)
        if decision.outcome == "allow":
            return "run"
        rule = str(Rule.exact(call.name, main_argument(call.name, args, order, workspace)))
        if decision.outcome == "deny":
            return self._decide(call, False, "policy", decision.why, rule)
        return await self._ask(call, args, decision, rule)

    async def _ask(self, call: ToolCall, args: dict[str, Any], decision: Decision, rule: str
                   ) -> Literal["run", "wait", "refused"]:
        mode = self.approvals
        if mode == "yes":
            return self._decide(call, True, "--yes", decision.why, rule)
        if mode == "defer":
            if call.id not in self.run.session.pending_approvals:
                self.run.emit(ApprovalRequested(self.run.run_id, self.run.step, call, decision.why, rule, time.time()))
            return "wait"
        if callable(mode):  # logged before the person is asked, like a deferred one: the trace shows the wait
            self.run.emit(ApprovalRequested(self.run.run_id, self.run.step, call, decision.why, rule, time.time()))
            answer = await mode(ApprovalRequest(call.name, args, decision.why, rule, call.id))
            scope = {"yes": "once", "session": "session", "always": "rule"}.get(answer, "once")
            if answer == "always":
                save_rule(rule, getattr(self.run.agent.settings, "env", None))
            allow = answer in ("yes", "session", "always")
            return self._decide(call, allow, person(), decision.why if allow else "the user said no", rule, scope)
        why = (f"{decision.why}, and no one could be asked (no terminal): run on a terminal, or with --yes, "
               "or --approvals defer")
        return self._decide(call, False, "policy", why, rule)

    def _decide(self, call: ToolCall, allow: bool, by: str, reason: str, rule: str, scope: str = "once"
                ) -> Literal["run", "refused"]:
        run = self.run
        decided = ApprovalDecided(run.run_id, run.step, call.id, call.name, allow, by, scope, rule, reason,
                                  time.time())
        if allow:
            where = bound_to(run.agent.workspace, run.session.key)
            decided = sign(decided, where, call.arguments, getattr(run.agent.settings, "env", None))
        run.emit(decided)
        return "run" if allow else self._refuse(call, reason)

    def _refuse(self, call: ToolCall, reason: str) -> Literal["refused"]:
        run = self.run
        run.unfinished.pop(call.id, None)
        run.emit(ToolCallFinished(run.run_id, run.step, call.id, call.name,
                                  f"Error: denied by policy: {reason}. The call was not run; do without it, or "
                                  "ask the user.", is_error=True))
        return "refused"


def _key(env: Any = None) -> bytes:
    """The user's approval key (made on first use, readable by them only)."""
    from ..keys import user_key

    return user_key("approvals.key", env)


def bound_to(workspace: Any, session: str) -> str:
    """What a signature binds a decision to besides the call: this workspace's session, by its key
    (`Session.key`: under `shou serve` an id no later session of the same name gets), so a copy of a signed
    row into another workspace's log, or another session, does not verify."""
    import pathlib

    return f"{pathlib.Path(workspace).resolve()}\x1e{session}"


def _payload(d: ApprovalDecided, session: str, arguments: str) -> bytes:
    # A once-decision is bound to the call's exact arguments; a session or rule grant to its rule.
    args = arguments if d.scope == "once" else ""
    return "\x1f".join((session, d.run_id, str(d.step), d.call_id, d.name, str(int(d.allow)), d.scope, d.rule,
                        args)).encode()


def sign(d: ApprovalDecided, session: str, arguments: str, env: Any = None) -> ApprovalDecided:
    """`d` with its signature."""
    import dataclasses

    mac = hmac.new(_key(env), _payload(d, session, arguments), hashlib.sha256).hexdigest()
    return dataclasses.replace(d, sig=mac)


def verify(d: ApprovalDecided, session: str, arguments: str, env: Any = None) -> bool:
    """Whether `d` was signed with this user's key, for this session and call."""
    if not d.sig:
        return False
    mac = hmac.new(_key(env), _payload(d, session, arguments), hashlib.sha256).hexdigest()
    return hmac.compare_digest(mac, d.sig)


def save_rule(rule: str, env: Any = None) -> None:
    """Add `rule` to `[permissions] allow` in the user's shou.toml (made if missing), keeping the rest."""
    import tomlkit

    from ..config import make_user_config_dir

    path = make_user_config_dir(env if env else None) / "shou.toml"
    doc = tomlkit.parse(path.read_text()) if path.exists() else tomlkit.document()
    table = doc.get("permissions")
    if table is None:
        table = tomlkit.table()
        doc["permissions"] = table
    allow = table.get("allow")
    if allow is None:
        allow = tomlkit.array()
        table["allow"] = allow
    if rule not in list(allow):
        allow.append(rule)
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(tomlkit.dumps(doc))
    tmp.replace(path)


def describe_arguments(args: dict[str, Any]) -> str:
    """Arguments in full, for a person to read: one `name: value` a line, long values as they are."""
    return "\n".join(f"  {k}: {v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
                     for k, v in args.items())


def decide(session: Any, call_id: str, allow: bool, reason: str, workspace: Any, by: str | None = None, *,
           emitter: Emitter | None = None) -> ApprovalRequested:
    """Record a person's decision on a call that waits in `session` (held by the caller, caught up), signed
    when it allows, through `emitter` (default: one for the session, with no secrets to replace nor
    observers); returns the request decided. `KeyError` when the call does not wait there."""
    req = session.pending_approvals.get(call_id)
    if req is None:
        raise KeyError(call_id)
    why = reason or ("approved" if allow else "denied")
    decided = ApprovalDecided(req.run_id, req.step, call_id, req.call.name, allow, by or person(), "once", req.rule,
                              why, time.time())
    if emitter is None:
        from .emitter import Emitter

        emitter = Emitter(session)
    emitter.emit(sign(decided, bound_to(workspace, session.key), req.call.arguments) if allow else decided)
    emitter.commit()
    return req
