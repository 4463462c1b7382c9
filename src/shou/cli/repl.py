"""`shou chat`: a prompt_toolkit REPL over one session. Ctrl-C stops the running turn; Ctrl-D leaves."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import TYPE_CHECKING, Any

from rich.console import Console

from ..errors import ShouError
from ..markup import escape
from .commands import command_task, help_lines
from .render import Renderer

if TYPE_CHECKING:
    from ..agent.agent import Agent
    from ..config import Settings

QUIT_WORDS = frozenset({"/quit", "/exit", "exit", "quit", "退出"})
HELP = """Commands:
  /help    this text
  /tools   the tools the model can use
  /clear   start the conversation afresh (the log keeps the old turns)
  /compact summarise the older conversation now, to free context
  /quit    leave (also: exit, 退出, Ctrl-D)
  /NAME arguments  run a custom command (below); //text sends text that starts with /
Anything else is a message to the agent. Ctrl-C stops a running turn. Paste multi-line text as is."""


async def run_repl(agent: Agent, settings: Settings, session_name: str | None) -> None:
    """Read messages until the user quits; each one is a run on the same session."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory, InMemoryHistory

    from ..config import make_user_config_dir
    from ..private import private_text_file

    console = Console(highlight=False)
    session = agent.session(session_name)
    session.acquire()  # the whole chat: another process must not interleave turns (SessionBusy if one runs it)
    try:
        # It holds every prompt typed (pasted keys too): 0600 before prompt_toolkit appends with the umask's mode.
        history_file = private_text_file(make_user_config_dir(settings.env) / "history")
        history: FileHistory | InMemoryHistory = FileHistory(str(history_file))
    except OSError:
        history = InMemoryHistory()
    prompt = PromptSession(history=history)
    earlier = len(session.messages)
    console.print(f"[bold]shou chat[/] · {escape(agent.model.name)} · session {escape(session.name)}"
                  + (f" ({earlier} earlier messages)" if earlier else "") + " · /help for commands")
    render = Renderer()
    try:
        while True:
            try:
                text = await prompt.prompt_async("› ")
            except KeyboardInterrupt:
                continue
            except EOFError:
                break
            line = text.strip()
            if not line:
                continue
            if line.lower() in QUIT_WORDS:
                break
            if await _builtin(line, agent, session, console):
                continue
            if line.startswith("/"):  # a custom command (or //text)
                try:
                    task, runner = command_task(agent, line)
                except ShouError as e:
                    console.print(f"[yellow]{escape(str(e))}[/]")
                    continue
                await _turn(runner, task, session, render)
            else:
                await _turn(agent, text, session, render)
    finally:
        from .build import close_resources

        session.release()
        await close_resources(agent)
    console.print("[dim]bye[/]")


async def _builtin(line: str, agent: Agent, session: Any, console: Console) -> bool:
    """Carry out `line` if it is one of the chat's own commands; whether it was."""
    if line == "/help":
        console.print(HELP)
        for row in help_lines(agent):
            console.print(row)
    elif line == "/clear":
        agent.emitter(session).clear()
        console.print("[dim]conversation cleared[/]")
    elif line == "/compact":
        try:
            done = await agent.compact(session)
        except Exception as e:  # a model error must not end the chat
            console.print(f"[red]compaction failed: {escape(str(e))}[/]")
            return True
        if done is None:
            console.print("[dim]nothing to compact yet[/]")
        else:
            console.print(f"[dim]compacted: {done.tokens_before} → {done.tokens_after} tokens[/]")
    elif line == "/tools":
        for t in agent.tools:
            console.print(f"[cyan]{t.name}[/]  {escape(t.description.splitlines()[0])}")
    else:
        return False
    return True


async def _turn(agent: Agent, text: str, session, render: Renderer) -> None:
    """One run; SIGINT cancels it (and only it) while it runs."""

    async def consume() -> None:
        async for event in agent.stream(text, session):
            render(event)

    task = asyncio.ensure_future(consume())
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        render.err.print("[yellow]turn cancelled[/]")
    except ShouError as e:  # a task too long, say: tell the person, keep the chat going
        render.err.print(f"[red]error:[/] {escape(str(e))}")
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
