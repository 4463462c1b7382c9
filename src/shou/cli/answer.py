"""Questions back to the user on the command line: the terminal prompt of `ask_user`, and `shou answer`.

In `shou chat` and an interactive `shou run` the model's question is asked on the terminal (its choices
numbered). A run that cannot prompt (no terminal, `--approvals defer`) offers the tool only when asked for
(`ask_user = true`, or `-o ask_user true`); it then stops `waiting_input`, and `shou answer SESSION TEXT`
answers from any process, before `shou resume SESSION` goes on.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated, Any

import typer
from rich.console import Console

from ..agent.asking import MAX_ANSWER, answer
from ..markup import escape
from .common import WorkspaceOpt, fail, open_log, utf8_text
from .render import printable

__all__ = ["TerminalAsker", "answer_command", "choose_ask_user"]


class TerminalAsker:
    """Asks the person at the terminal the model's question (its choices numbered); a choice may be given by
    its number. The run's renderer shows a question only when the run stops waiting for it (the events reach
    it after the prompt)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False, soft_wrap=True)
        self._lock = asyncio.Lock()  # parallel questions are asked one after the other

    async def __call__(self, question: str, choices: tuple[str, ...]) -> str:
        async with self._lock:
            c = self.console
            c.print(f"\n[bold cyan]? the agent asks:[/] {escape(printable(question))}")
            for i, choice in enumerate(choices, 1):
                c.print(f"  [bold]{i}[/]. {escape(printable(choice))}")
            hint = f"a number (1-{len(choices)}) or your own words" if choices else "your answer"
            c.print(f"answer [dim]({hint})[/]: ", end="")
            try:
                line = await asyncio.to_thread(sys.stdin.readline)
            except (EOFError, OSError):
                line = ""
            text = line.rstrip("\n")
            picked = text.strip()
            if picked.isdigit() and 1 <= int(picked) <= len(choices):
                return choices[int(picked) - 1]
            return text


def choose_ask_user(settings: Any, approvals: Any) -> Any:
    """How `ask_user` is put in this command: on the terminal when there is one (unless the settings say
    `ask_user = false` or approvals are deferred), deferred when the settings ask for it, else not offered."""
    wanted = getattr(settings, "ask_user", None)
    if wanted is False or (settings.tools is not None and "ask_user" not in settings.tools):
        return None
    if approvals != "defer" and sys.stdin.isatty() and sys.stderr.isatty():
        return TerminalAsker()
    return "defer" if wanted else None


def answer_command(
    session: Annotated[str, typer.Argument(metavar="SESSION", help="The session whose run waits for an answer.",
                                           callback=utf8_text)],
    text: Annotated[str, typer.Argument(metavar="TEXT", help="Your answer (- reads it from stdin).",
                                        callback=utf8_text)],
    call: Annotated[str | None, typer.Option("--call", metavar="CALL_ID", callback=utf8_text,
                                             help="Which question, when several wait.")] = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Answer the question a run waits on (`ask_user`, stopped `waiting_input`); `shou resume` then goes on."""
    from ..errors import ShouError
    from ..session import Session
    from .approve import _emitter

    if text == "-":
        text = sys.stdin.read()
    if len(text) > MAX_ANSWER:
        raise fail(f"the answer is {len(text)} characters, over the {MAX_ANSWER} allowed")
    with open_log(workspace, readonly=False) as store:
        if store is None or session not in {info.name for info in store.sessions()}:
            raise fail(f"no session {session!r} in this workspace (`shou sessions` lists them)")
        held = Session(session, store)
        try:
            held.acquire()  # the run is stopped; nobody else may write the session meanwhile
        except ShouError as e:
            raise fail(str(e)) from None
        try:
            held.refresh()
            asked = _pick(held.pending_questions, call, session)
            answer(held, asked.call_id, text, emitter=_emitter(held, workspace))
        finally:
            held.release()
    typer.echo(f"answered {printable(asked.question)!r} in session {session}; `shou resume {session}` goes on")


def _pick(pending: dict[str, Any], call: str | None, session: str) -> Any:
    """The question `call` names among `pending` (the only one, without `call`)."""
    if call is not None:
        if call not in pending:
            raise fail(f"no question {call!r} waits in session {session!r}")
        return pending[call]
    if not pending:
        raise fail(f"no question waits for an answer in session {session!r}")
    if len(pending) > 1:
        listed = "\n".join(f"  {cid}: {printable(q.question)}" for cid, q in pending.items())
        raise fail(f"{len(pending)} questions wait in session {session!r}; name one with --call:\n{listed}")
    return next(iter(pending.values()))
