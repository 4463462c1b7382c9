"""`shou trace [SESSION|RUN]`, `shou trace show CALL` and `shou usage`: what runs did, took and cost.

All three read the session log (`.shou/shou.db`, through shou.trace) and never write it. `--json` gives
scripts the same content, with every model call's full request. A cost nobody knows is shown as
`unknown` (or `≥ $X` when part of it is known), never as zero.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from .. import trace as tr
from .. import usage_report as ur
from ..events import CALL_NOTICES
from ..markup import escape as _markup_escape
from .common import WorkspaceOpt, fail, finite, open_log, utf8_text
from .render import STATUS_STYLE, format_arguments, json_text, printable, short


def escape(text: str) -> str:
    """Text from the log (a provider's model name, a tool's output, a planted row) made safe to print: rich
    markup escaped and terminal control characters shown as U+FFFD (rich passes ESC sequences through)."""
    return _markup_escape(printable(str(text)))

if TYPE_CHECKING:
    from ..store.sqlite import SQLiteStore
    from ..usage import Usage

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts (with each request's full messages).")]
UsageJsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
FullOpt = Annotated[bool, typer.Option("--full", help="Show arguments, results and messages whole, not cut.")]
_CUT = 4000  # characters of one message `trace show` prints without --full


def trace(
    target: Annotated[str | None, typer.Argument(
        metavar="SESSION|RUN|show", callback=utf8_text,
        help="A session, a run id (run_...), or `show` followed by a model call's id. Default: the latest "
             "session.")] = None,
    call: Annotated[str | None, typer.Argument(metavar="CALL", help="With `show`: the model call's id.",
                                                          callback=utf8_text)] = None,
    workspace: WorkspaceOpt = None, json_out: JsonOpt = False, full: FullOpt = False,
) -> None:
    """Show what runs did, step by step: each model call (model, time, tokens, cost, why it stopped) and
    the tool calls it made, compactions, and how the run ended.

    `shou trace show CALL` prints one model call whole: every message of its request, the tools it offered,
    its parameters, and the response. Call ids are in the timeline and in `--json`.
    """
    with open_log(workspace) as store:
        if store is None:
            raise fail(f"no sessions yet in {(workspace or Path.cwd()).resolve()}")
        if target == "show":
            if not call:
                raise fail("give the model call's id: shou trace show CALL (`shou trace` lists them)")
            _show_call(store, call, json_out, full)
            return
        if call is not None:
            raise fail(f"unexpected argument {call!r}: give one session or run (or: shou trace show CALL)")
        runs, session = _runs(store, target)
        if json_out:
            tr.resolve(store, [c for r in runs for c in r.model_calls])
            typer.echo(json_text({"session": session, "runs": [tr.run_json(r) for r in runs]}))
            return
        running = store.is_locked(session) if runs and runs[-1].status == tr.UNFINISHED else False
    out = Console(highlight=False)
    out.print(f"[bold]session {escape(session)}[/] [dim]· {len(runs)} run(s)[/]")
    for i, run in enumerate(runs):
        _timeline(out, run, full, running and i == len(runs) - 1)


def _runs(store: SQLiteStore, target: str | None) -> tuple[list[tr.RunTrace], str]:
    """The runs `target` names (a run id, or all of a session's), and their session."""
    if target is not None and target.startswith("run_"):
        run = tr.find_run(store, target)
        if run is None:
            raise fail(f"no run {target!r} in this workspace (`shou trace` lists a session's runs)")
        return [run], run.session
    found = store.sessions()
    name = target or (found[0].name if found else None)
    if name is None:
        raise fail("no sessions yet in this workspace")
    if not store.exists(name):
        raise fail(f"no session {name!r} in this workspace (`shou sessions` lists them)")
    return tr.traces(store, name), name


# ---------------------------------------------------------------------------------------------- timeline


def secs(seconds: float | None) -> str:
    """A duration for people: `0.31 s`, `12.3 s`, `4m05s`; `-` when unknown."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def money(cost: float | None, known: float = 0.0) -> str:
    """A cost: `$0.0123`, `unknown`, or `≥ $0.0123` when only part of it is known."""
    if cost is None:
        return f"≥ {money(known)}" if known > 0 else "unknown"
    if cost == 0:
        return "$0"
    return f"${cost:.2f}" if cost >= 1 else f"${cost:.4f}" if cost >= 0.0001 else f"${cost:.6f}"


def tokens(usage: Usage) -> str:
    """`in/out/cached` tokens; `~` marks counts shou estimated because the provider sent none."""
    text = f"{usage.input_tokens:,}/{usage.output_tokens:,}/{usage.cached_tokens:,}"
    return "~" + text if usage.estimated else text


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) if seconds else "?"


def _timeline(out: Console, run: tr.RunTrace, full: bool, running: bool) -> None:
    style = STATUS_STYLE.get(run.status, "red" if run.status != tr.UNFINISHED else "yellow")
    of = f" [magenta](for {escape(run.parent)})[/]" if run.parent else ""
    out.print(f"\n[bold cyan]run {escape(run.run_id)}[/]{of} [{style}]{escape(run.status)}[/] [dim]· "
              f"{escape(run.model)} · {_when(run.started)}" + (f" · resumed {run.resumed}×" if run.resumed else "")
              + "[/]")
    task = printable(run.task) if full else short(run.task, 300)
    out.print(f"[bold]task[/] {escape(task)}")
    # One width for every run's table, so their columns line up; wider than 120 only spreads the numbers out.
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="dim", width=min(out.width, 120))
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("", ratio=1, overflow="fold")
    table.add_column("in/out/cached", justify="right", no_wrap=True)
    table.add_column("cost", justify="right", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    compactions = list(run.compactions)
    # retries show on their call; the sort keeps log order within a step
    notices = sorted(((n, kind, text) for n, kind, text in run.notices if kind not in CALL_NOTICES),
                     key=lambda n: n[0])  # those show on their call
    for step in run.steps:
        while notices and notices[0][0] < step.step:  # outside any step (a failed recall, an alert)
            _notice_row(table, "", notices.pop(0)[2])
        while compactions and compactions[0].step <= step.step:
            _compaction_row(table, compactions.pop(0))
        label = str(step.step)
        for call in step.model_calls:
            _call_row(table, label, call, full)
            label = ""
        for tc in step.tool_calls:
            table.add_row(label, _tool_text(tc, full), "", "", secs(tc.latency))
            label = ""
        for h in (h for h in run.handoffs if h.step == step.step):
            reason = f": {escape(short(h.reason, 200))}" if h.reason else ""
            table.add_row(label, f"[magenta]⇄ handoff {escape(h.source)} → {escape(h.target)}[/]{reason}", "", "", "")
            label = ""
        while notices and notices[0][0] == step.step:
            _notice_row(table, label, notices.pop(0)[2])
            label = ""
    for c in compactions:
        _compaction_row(table, c)
    for _, _, text in notices:
        _notice_row(table, "", text)
    out.print(table)
    out.print(_ending(run, running))


def _call_row(table: Table, label: str, call: tr.ModelCallTrace, full: bool) -> None:
    parts = [f"[bold]{escape(call.model or 'model')}[/]"]
    if call.agent:  # a run that was handed over: which agent answered
        parts.insert(0, f"[green]{escape(call.agent)}[/]")
    if call.purpose:
        parts.append(f"[magenta]{escape(call.purpose)}[/]")
    if call.sent_model:  # a fallback model answered
        parts.append(f"[yellow]answered by fallback {escape(call.sent_model)}[/]")
    elif call.response_model and not call.response_model.startswith(call.model):  # a dated version is no news
        parts.append(f"[dim]answered by {escape(call.response_model)}[/]")
    if call.finish_reason:
        parts.append(escape(call.finish_reason))
    if call.ttft is not None:
        parts.append(f"[dim]ttft {secs(call.ttft)}[/]")
    if call.retries:
        parts.append(f"[yellow]{call.retries} retr{'y' if call.retries == 1 else 'ies'}[/]")
    if call.cached:
        parts.append("[magenta]cache hit[/]")
    text = " · ".join(parts) + f"\n[dim]{escape(call.id)}"  # the id `shou trace show` takes
    if call.message is not None and call.message.text:
        said = printable(call.message.text) if full else short(call.message.text, 100)
        text += f" “{escape(said)}”"
    text += "[/]"
    if call.error:
        text += f"\n[red]{escape(short(call.error, 400))}[/]"
    elif not call.answered:
        text += "\n[yellow]no answer logged (the run is unfinished)[/]"
    for note in call.notes:
        text += f"\n[yellow]{escape(short(note, 200))}[/]"
    u = call.usage
    table.add_row(label, text, tokens(u) if u else "-", money(u.cost) if u else "-", secs(call.latency))


def _notice_row(table: Table, label: str, text: str) -> None:
    table.add_row(label, f"[yellow]! {escape(short(text, 400))}[/]", "", "", "")


def _tool_text(tc: tr.ToolCallTrace, full: bool) -> str:
    args = format_arguments(tc.arguments, 100_000 if full else 60)
    text = f"[cyan]→ {escape(tc.name)}[/]({escape(args)})"
    if tc.content is None:
        text += " [yellow]no result logged[/]" if tc.started else " [yellow]not run[/]"
    else:
        result = printable(tc.content) if full else short(tc.content, 80)
        text += f" [red]✗ {escape(result)}[/]" if tc.is_error else f" [dim]← {escape(result)}[/]"
    if tc.approval:
        text += f" [dim]({escape(tc.approval)})[/]"
    return text


def _compaction_row(table: Table, c: tr.CompactionTrace) -> None:
    u = c.usage
    calls = f" (call{'s' if len(c.calls) > 1 else ''} {escape(', '.join(c.calls))})" if c.calls else ""
    table.add_row("", f"[dim]compacted {c.tokens_before:,} → {c.tokens_after:,} tokens"
                      f"{' by ' + escape(c.model) if c.model else ''}{calls}[/]",
                  tokens(u) if u else "?", money(u.cost) if u else "unknown", secs(c.latency) if u else "-")


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _ending(run: tr.RunTrace, running: bool) -> str:
    usage, known = run.usage
    style = STATUS_STYLE.get(run.status, "yellow" if run.status == tr.UNFINISHED else "red")
    wall = run.wall_time if run.wall_time is not None else max(0.0, run.ended - run.started)
    line = (f"[{style}]{escape(run.status)}[/] · {_n(len(run.steps), 'step')} · {_n(usage.requests, 'model call')} "
            f"· {_n(len(run.tool_calls), 'tool call')} · {money(usage.cost, known)} · {secs(wall)}\n[dim]tokens "
            f"{usage.input_tokens:,} in / {usage.output_tokens:,} out / {usage.cached_tokens:,} cached[/]")
    if run.status == tr.UNFINISHED:
        line += ("\n[yellow]no end logged: it is running now[/]" if running else
                 "\n[yellow]no end logged: its process stopped (`shou resume` continues it)[/]")
    elif run.error and run.status != "completed":
        line += f"\n[red]{escape(short(run.error, 400))}[/]"
    return line


# ---------------------------------------------------------------------------------------------- one call


def _show_call(store: SQLiteStore, call_id: str, json_out: bool, full: bool) -> None:
    found = tr.find_model_call(store, call_id)
    if found is None:
        raise fail(f"no model call {call_id!r} in this workspace (`shou trace` lists the calls' ids)")
    run, call = found
    if json_out:
        typer.echo(json_text({"session": run.session, "task": run.task, **tr.call_json(call)}))
        return
    out = Console(highlight=False, soft_wrap=True)
    out.print(f"[bold]model call {escape(call.id)}[/] [dim]· run {escape(run.run_id)} step {call.step} · session "
              f"{escape(run.session)} · {_when(call.at)}[/]")
    out.print(f"model {escape(call.model)}" + (f" ({escape(call.provider)})" if call.provider else "")
              + f" · {call.message_count} messages · ~{call.prompt_tokens:,} prompt tokens (shou's estimate)")
    if call.params:
        out.print("params " + escape(", ".join(f"{k}={json.dumps(v)}" for k, v in call.params.items())))
    if not call.recorded:
        out.print("[yellow]request not recorded (this run was logged before shou kept requests)[/]")
    else:
        names = [str((t.get("function") or {}).get("name", "?")) for t in call.tools or [] if isinstance(t, dict)]
        if call.tools is None:
            out.print("tools [yellow]pruned (deleted by retention)[/]")
        elif names:
            out.print("tools " + escape(", ".join(names)))
        if call.pruned:
            out.print(f"[yellow]{call.pruned} part(s) of this request were deleted by retention[/]")
        for i, message in enumerate(call.messages or [], 1):
            role = " ".join(str(message.get(k)) for k in ("role", "name") if message.get(k)) \
                if isinstance(message, dict) else ""
            out.print(f"\n[bold]\\[{i}] {escape(role)}[/]")
            for line in _message_lines(message, full):
                out.print(line)
    out.print("\n[bold]response[/]")
    if call.message is None:
        out.print(f"[red]{escape(call.error or 'no answer logged (the run is unfinished)')}[/]")
        return
    out.print("[dim]" + escape(" · ".join(_response_facts(call))) + "[/]")
    for line in _message_lines(call.message.to_wire(), full):
        out.print(line)


def _response_facts(call: tr.ModelCallTrace) -> list[str]:
    """How an answered call went, for its response's header line."""
    u = call.usage
    facts = [call.finish_reason or "?", secs(call.latency)]
    if call.ttft is not None:
        facts.append(f"ttft {secs(call.ttft)}")
    if u is not None:
        facts += [f"{tokens(u)} tokens (in/out/cached)", money(u.cost)]
    if call.retries:
        facts.append(f"{call.retries} retries")
    if call.cached:
        facts.append("cache hit")
    return facts


def _message_lines(message: Any, full: bool) -> list[str]:
    """A request message (wire form, or a pruned/cut marker) as printable lines."""
    if not isinstance(message, dict):
        return [escape(short(json.dumps(message), 400))]
    if "_pruned" in message:
        return ["[yellow]pruned: retention deleted this message's content[/]"]
    if "_unreadable" in message:
        return ["[red]unreadable: the stored message is damaged[/]"]
    if "_cut" in message:
        return [f"[yellow]cut: {escape(str(message['_cut']))}; its start:[/]", _text(str(message.get("head", "")),
                                                                                     full)]
    lines = []
    if message.get("tool_call_id"):
        lines.append(f"[dim]answers {escape(str(message['tool_call_id']))}[/]")
    content = message.get("content")
    if isinstance(content, str):
        lines.append(_text(content, full))
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                lines.append(_text(str(part.get("text", "")), full))
            else:  # whatever a damaged or planted log holds, as long as it is not text: its size, no crash
                image = part.get("image_url") if isinstance(part, dict) else None
                url = image.get("url", "") if isinstance(image, dict) else image
                lines.append(f"[dim]\\[image, {len(str(url or '')):,} characters of data URL][/]")
    calls = message.get("tool_calls")
    for c in calls if isinstance(calls, list) else []:
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict):
            lines.append(escape(short(json.dumps(c), 400)))
            continue
        args = format_arguments(str(fn.get("arguments", "")), 100_000 if full else 400)
        lines.append(f"[cyan]→ {escape(short(str(fn.get('name')), 200))}[/]({escape(args)}) "
                     f"[dim]{escape(short(str(c.get('id')), 200))}[/]")
    return lines


def _text(text: str, full: bool) -> str:
    shown = printable(text)
    if not full and len(shown) > _CUT:
        shown = shown[:_CUT] + f"… ({len(text):,} characters; --full shows all)"
    return escape(shown)


# ---------------------------------------------------------------------------------------------- usage


def usage(
    by: Annotated[list[str] | None, typer.Option(
        "--by", metavar="day|model|session",
        help="Group by day (UTC), model and/or session; repeatable or comma-separated (default: day,model).")] = None,
    since: Annotated[float | None, typer.Option(
        "--since", metavar="DAYS", min=0, max=1_000_000, callback=finite,
        help="Only the model calls of the last DAYS days.")] = None,
    workspace: WorkspaceOpt = None, json_out: UsageJsonOpt = False,
) -> None:
    """Tokens, requests and cost of the workspace's model calls, per day, model or session, with a total.

    A cost that is not known (a model without a price: `[models."NAME"]` in shou.toml sets one) shows as
    `unknown`, or as `≥ $X` when the rest is known.
    """
    groups = [g.strip() for item in by or ["day,model"] for g in item.split(",") if g.strip()]
    wrong = [g for g in groups if g not in ur.GROUPS]
    if wrong:
        raise fail(f"--by {', '.join(wrong)}: group by day, model or session")
    groups = [g for g in ur.GROUPS if g in groups]  # fixed column order whatever the flag order
    start = time.time() - since * 86400 if since is not None else None
    with open_log(workspace) as store:
        rows = ur.usage_report(store, groups, start) if store is not None else []
    total = ur.usage_total(rows)
    if json_out:
        typer.echo(json_text({"by": groups, "since": start, "rows": [r.to_json() for r in rows],
                               "total": total.to_json()}))
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for g in groups:
        table.add_column(g, overflow="fold")
    for name in ("requests", "input", "output", "cached", "cost"):
        table.add_column(name, justify="right", no_wrap=True)
    for r in rows:
        table.add_row(*(escape(getattr(r, g)) for g in groups), *_figures(r), end_section=r is rows[-1])
    table.add_row(*(["[bold]total[/]"] + [""] * (len(groups) - 1) if groups else []), *_figures(total, bold=True))
    out = Console(highlight=False)
    since_text = f" since {dt.datetime.fromtimestamp(start, dt.UTC):%Y-%m-%d %H:%M} UTC" if start else ""
    if not rows:
        out.print(f"no model calls logged{since_text} in {(workspace or Path.cwd()).resolve()}")
        return
    out.print(table)
    if total.cost is None:
        hint = 'set it with [models."NAME"] input_price and output_price (USD per million tokens) in shou.toml'
        out.print(f"[dim]unknown: a model without a price took part; {escape(hint)}[/]")


def _figures(r: ur.UsageRow, bold: bool = False) -> list[str]:
    cells = [f"{r.requests:,}", ("~" if r.estimated else "") + f"{r.input_tokens:,}", f"{r.output_tokens:,}",
             f"{r.cached_tokens:,}", money(r.cost, r.known_cost)]
    return [f"[bold]{c}[/]" for c in cells] if bold else cells
