"""Showing a run's events in a terminal: text as it streams, each tool call and its result, a summary.

The answer text goes to stdout; tool calls, notices and the summary go to stderr, so
`shou run "..." > answer.txt` captures just what the model said.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, TextIO

from rich.console import Console

from ..events import (
    ApprovalDecided,
    ApprovalRequested,
    Compacted,
    Event,
    Handoff,
    InputAnswered,
    InputRequested,
    Notice,
    PlanUpdated,
    Reviewed,
    RunFinished,
    RunResumed,
    RunStarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
)
from ..markup import escape
from ..usage import format_cost

# C0 controls but tab and newline, DEL, and C1 controls: what a terminal acts on (escape sequences can move
# the cursor, rewrite what was printed, set the title or the clipboard). Model text, tool output and file
# names are untrusted, so they are shown with these replaced.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")  # and lone surrogates: no UTF-8 for them
# Characters that make a terminal show text other than what it is: bidi overrides and isolates reorder it
# (a right-to-left override shows `lss.txt` for `txt.ssl`), zero-width ones hide inside a word,
# separators break the line.
_INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff\u2028\u2029\u061c\u180e\u2060-\u2064]")


# What JSON leaves as it is with ensure_ascii=False that a terminal may still act on: DEL, the C1 controls
# (0x9b is CSI to some terminals) and the line and paragraph separators. JSON escapes C0 controls itself.
# A lone surrogate is escaped too: still JSON, and no UTF-8 stream can write it raw.
_JSON_RAW = re.compile("[\ud800-\udfff\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff\u061c"
                       "\u180e\u2060-\u2064]")


def json_text(value: Any) -> str:
    """`value` as one line of JSON for the terminal or a pipe: other scripts' text as itself, but with the
    characters a terminal could act on escaped (`\\u009b`), so it is still the same JSON."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, ensure_ascii=False))


def printable(text: str) -> str:
    """`text` with every terminal control character (but tab and newline) and lone surrogate (a file name's
    undecodable bytes) shown as U+FFFD, and every bidi
    control, zero-width character and line or paragraph separator shown escaped (`\\u202e`)."""
    return _INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", _CONTROLS.sub("\ufffd", text))


STATUS_STYLE = {"completed": "green", "cancelled": "yellow", "max_steps": "yellow", "loop": "yellow",
                "timeout": "yellow", "budget": "yellow", "error": "red", "waiting_approval": "yellow",
                "blocked": "red", "waiting_input": "yellow", "invalid_output": "red"}


def short(text: str, limit: int = 160) -> str:
    """One line of at most `limit` characters (control characters replaced)."""
    flat = " ".join(printable(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def format_arguments(arguments: str, limit: int = 160) -> str:
    """Tool-call arguments as `k=v, ...` when they parse, else the raw text."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return short(arguments, limit)
    if isinstance(args, dict):
        return short(", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items()), limit)
    return short(arguments, limit)


class Renderer:
    """Consumes events and prints them; `json_lines=True` prints each event as one JSON line instead. `typed`:
    the run's answer is typed (`--output-schema`), so stdout gets the validated JSON alone, at the end, and
    none of the model's text (its attempts)."""

    def __init__(self, out: TextIO | None = None, err: Console | None = None, *, json_lines: bool = False,
                 typed: bool = False) -> None:
        self.out = out or sys.stdout
        self.err = err or Console(stderr=True, highlight=False, soft_wrap=True)
        self.json_lines = json_lines
        self.typed = typed
        self._midline = False
        self.session = ""
        # Calls of one step, numbered in the order the model made them: with several running at once the
        # results arrive in completion order, and each says which call it answers.
        self._calls: dict[str, tuple[int, int]] = {}  # call id -> (step, number within the step)
        self._per_step: dict[int, int] = {}
        self._asked: dict[str, InputRequested] = {}  # questions not answered yet, shown if the run stops for them

    def __call__(self, event: Event) -> None:
        if self.json_lines:
            self.out.write(json_text(event.to_dict()) + "\n")
            self.out.flush()
            return
        if event.parent:
            self._sub(event)
            return
        if isinstance(event, RunStarted | RunResumed):
            self.session = getattr(event, "session", "") or self.session
        if isinstance(event, TextDelta):
            self._text(event)
        elif isinstance(event, ToolCallStarted):
            self._newline()
            n = self._per_step[event.step] = self._per_step.get(event.step, 0) + 1
            self._calls[event.call.id] = (event.step, n)
            self.err.print(f"[cyan]→ {escape(self._label(event.call.name, event.call.id))}[/]"
                           f"({escape(format_arguments(event.call.arguments))})")
        elif isinstance(event, ToolCallFinished):
            style = "red" if event.is_error else "dim"
            self.err.print(f"  [{style}]← {escape(self._label(event.name, event.call_id))}: "
                           f"{escape(short(event.content))}[/]")
        elif isinstance(event, ApprovalRequested | ApprovalDecided | InputRequested | InputAnswered):
            self._person(event)
        elif isinstance(event, Compacted):
            self._newline()
            self.err.print(f"[dim]context compacted: {event.tokens_before} → {event.tokens_after} tokens[/]")
        elif isinstance(event, Notice):
            if event.kind == "alert":  # the alert monitor wrote its own line on stderr
                return
            self._newline()
            self.err.print(f"[yellow]! {escape(printable(event.text))}[/]")
        elif isinstance(event, PlanUpdated):
            self._newline()
            self.plan(event)
        elif isinstance(event, Reviewed):
            self._newline()
            self.review(event)
        elif isinstance(event, Handoff):
            self._newline()
            why = f" [dim]({escape(short(event.reason, 200))})[/]" if event.reason else ""
            self.err.print(f"[magenta]⇄ {escape(event.source)} hands over to {escape(event.target)}[/]{why}")
        elif isinstance(event, RunFinished):
            self._newline()
            self._unanswered()
            self.summary(event)

    def _text(self, event: TextDelta) -> None:
        """The model's text as it streams; none for a typed answer (its JSON is printed whole at the end)."""
        if self.typed:
            return
        self.out.write(printable(event.text))
        self.out.flush()
        self._midline = not event.text.endswith("\n")

    def _approval(self, event: ApprovalRequested | ApprovalDecided) -> None:
        """A call that waits for a person, or what they decided."""
        if isinstance(event, ApprovalRequested):
            self.err.print(f"[yellow]⏸ {escape(event.call.name)}({escape(format_arguments(event.call.arguments))}) "
                           f"waits for approval: call {escape(event.call.id)} ({escape(event.why)})[/]")
            return
        verdict = "[green]allowed[/]" if event.allow else "[red]denied[/]"
        scope = {"session": " for this session", "rule": " always (added to your shou.toml)"}.get(event.scope, "")
        self.err.print(f"  {verdict}{scope}: {escape(event.name)} by {escape(event.by)} "
                       f"[dim]({escape(printable(event.reason))})[/]")

    def _person(self, event: ApprovalRequested | ApprovalDecided | InputRequested | InputAnswered) -> None:
        """What a person is asked or said: an approval, or a question of `ask_user`."""
        if isinstance(event, InputRequested | InputAnswered):
            self._input(event)
        else:
            self._newline()
            self._approval(event)

    def _input(self, event: InputRequested | InputAnswered) -> None:
        """A question is kept until answered (a terminal prompts it itself); an answer is shown."""
        if isinstance(event, InputRequested):
            self._asked[event.call_id] = event
            return
        self._asked.pop(event.call_id, None)
        self._newline()
        self.err.print(f"  [green]answered[/] by {escape(event.by)}: {escape(short(event.answer))}")

    def _unanswered(self) -> None:
        """The questions the run stops for (a terminal prompted the others already)."""
        for asked in self._asked.values():
            self._question(asked)
        self._asked.clear()

    def _question(self, event: InputRequested) -> None:
        """The model's question to the person, its choices numbered."""
        self.err.print(f"[bold cyan]? the agent asks:[/] {escape(printable(event.question))} "
                       f"[dim](call {escape(event.call_id)})[/]")
        for i, choice in enumerate(event.choices, 1):
            self.err.print(f"  [bold]{i}[/]. {escape(printable(choice))}")

    def review(self, event: Reviewed) -> None:
        """A reviewer's verdict on the answer."""
        if event.approved:
            self.err.print("[green]✓ review: approved[/]")
        else:
            self.err.print(f"[yellow]✗ review: not approved: {escape(short(event.feedback, 300))}[/]")

    def plan(self, event: PlanUpdated) -> None:
        """The plan as a checklist: done, running, failed and pending steps."""
        marks = {"done": "[green]✓[/]", "running": "[cyan]▶[/]", "failed": "[red]✗[/]", "pending": "[dim]○[/]"}
        note = f" [dim]({escape(short(event.note, 120))})[/]" if event.note else ""
        self.err.print(f"[bold]plan[/] (revision {event.revision}){note}")
        for n, step in enumerate(event.steps, 1):
            why = f" [red]— {escape(short(step.result, 120))}[/]" if step.status == "failed" and step.result else ""
            self.err.print(f"  {marks.get(step.status, '?')} {n}. {escape(short(step.text, 140))}{why}")

    def _sub(self, event: Event) -> None:
        """A sub-run's event (a plan step, a sub-agent, a review), indented under the run it works for: its
        tool calls and how it ended, not its streamed text."""
        if isinstance(event, RunStarted):
            self._newline()
            self.err.print(f"  [magenta]↳ {escape(event.run_id)}[/] [dim]{escape(short(event.task, 120))}[/]")
        elif isinstance(event, ToolCallStarted):
            self._newline()
            args = escape(format_arguments(event.call.arguments))
            self.err.print(f"    [cyan]→ {escape(event.call.name)}[/]({args})")
        elif isinstance(event, ToolCallFinished):
            style = "red" if event.is_error else "dim"
            self.err.print(f"    [{style}]← {escape(event.name)}: {escape(short(event.content))}[/]")
        elif isinstance(event, Notice) and event.kind != "alert":
            self.err.print(f"    [yellow]! {escape(printable(event.text))}[/]")
        elif isinstance(event, RunFinished):
            style = STATUS_STYLE.get(event.status, "red")
            self.err.print(f"  [magenta]↳ {escape(event.run_id)}[/] [{style}]{event.status}[/] "
                           f"[dim]({event.steps} step{'s' * (event.steps != 1)}, {event.usage.total_tokens} tokens)[/]")

    def _label(self, name: str, call_id: str) -> str:
        """`name`, or `name #2` when its step made more than one call."""
        step, n = self._calls.get(call_id, (0, 0))
        return f"{name} #{n}" if self._per_step.get(step, 0) > 1 or n > 1 else name

    def _newline(self) -> None:
        if self._midline:
            self.out.write("\n")
            self.out.flush()
            self._midline = False

    def summary(self, done: RunFinished) -> None:
        """The closing line: status, session, steps, tokens, seconds (and the error, if any); a typed answer's
        JSON on stdout first."""
        if self.typed and done.status == "completed":
            self.out.write(json_text(json.loads(done.answer)) + "\n")
            self.out.flush()
        if done.error and done.status != "completed":
            self.err.print(f"[{STATUS_STYLE.get(done.status, 'red')}]{escape(printable(done.error))}[/]")
        style = STATUS_STYLE.get(done.status, "red")
        self.err.print(
            f"[{style}]{done.status}[/] · session {escape(self.session or '?')} · "
            f"{done.steps} step{'s' * (done.steps != 1)} · "
            f"{done.usage.total_tokens} tokens ({done.usage.input_tokens} in, {done.usage.output_tokens} out) · "
            f"{format_cost(done.usage.cost)} · {done.wall_time:.1f} s"
        )
