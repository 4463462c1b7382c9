"""What `run`, `resume` and `chat` share: their flags, and building the agent from settings."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import typer

from ..errors import UserError
from ..markup import escape
from .common import err, fail, finite, utf8_text
from .observers import observers

ModelOpt = Annotated[str | None, typer.Option(
    "--model", "-m", metavar="MODEL", help="Model, as PROVIDER:MODEL or MODEL (SHOU_MODEL).", callback=utf8_text)]
BaseUrlOpt = Annotated[str | None, typer.Option(
    "--base-url", metavar="URL", help="Any OpenAI-compatible endpoint (SHOU_BASE_URL).")]
Provider = Literal["openai", "deepseek", "qwen", "ollama", "vllm", "llamacpp", "custom"]
ProviderOpt = Annotated[Provider | None, typer.Option(
    "--provider", help="Which service's defaults to use (SHOU_PROVIDER).")]
StepsOpt = Annotated[int | None, typer.Option(
    "--max-steps", metavar="N", min=1, max=100_000, help="Most model calls in one run (default 20).")]
ToolsOpt = Annotated[str | None, typer.Option(
    "--tools", metavar="NAMES", help="Offer only these tools (comma-separated).")]
SessionOpt = Annotated[str | None, typer.Option(
    "--session", "-s", metavar="NAME", help="Continue (or start) the named session.", callback=utf8_text)]
FunctionsOpt = Annotated[list[Path] | None, typer.Option(
    "--functions", metavar="FILE", help="A Python file whose @tool functions are offered too (repeatable).")]
StreamOpt = Annotated[bool | None, typer.Option("--stream/--no-stream", help="Stream the model's output.")]
VisionOpt = Annotated[bool | None, typer.Option(
    "--vision/--no-vision", help="Send images (screenshots) to the model (default: known vision models).")]
SandboxOpt = Annotated[Literal["auto", "bubblewrap", "docker", "local"] | None, typer.Option(
    "--sandbox", help="Where shell and run_code run (local: no isolation).")]
OptionOpt = Annotated[list[str] | None, typer.Option(
    "--option", "-o", metavar="KEY VALUE",
    help="A model option (temperature, max_tokens, top_p, seed) or any setting for this run (repeatable), "
         "e.g. -o temperature 0.2 -o token_budget 20000.")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Allow every call the permission policy would ask about.")]
ApprovalsOpt = Annotated[Literal["ask", "yes", "deny", "defer"] | None, typer.Option(
    "--approvals", help="What a call that needs approval does: ask on the terminal (default there), yes, deny "
                        "(default without a terminal), or defer (stop waiting_approval; shou approve, shou resume).")]
MaxCostOpt = Annotated[float | None, typer.Option(
    "--max-cost", metavar="USD", min=0, max=1_000_000, callback=finite,
    help="Most US dollars this run may spend; checked before each model call.")]
TokenBudgetOpt = Annotated[int | None, typer.Option(
    "--token-budget", metavar="N", min=1, max=10**12, help="Most tokens (input + output) this run may use.")]
OtelOpt = Annotated[bool, typer.Option(
    "--otel", help="Export the trace by OpenTelemetry (OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT, default "
                   "http://localhost:4318).")]
PlanOpt = Annotated[bool, typer.Option(
    "--plan", help="Plan first: break the task into steps, run each as its own loop, re-plan when one fails.")]
ReflectOpt = Annotated[bool, typer.Option(
    "--reflect", help="Have a critic check the final answer; a rejected one goes back with its feedback.")]
CodeOpt = Annotated[bool, typer.Option(
    "--code", help="Code as action: the model writes Python that calls the tools (in the sandbox).")]
ContinueOpt = Annotated[bool, typer.Option("--continue", "-c", help="Continue the workspace's latest session.")]


@dataclass
class Options:
    """The flags shared by `run` and `chat`."""

    model: str | None = None
    base_url: str | None = None
    provider: str | None = None
    max_steps: int | None = None
    workspace: Path | None = None
    tools: str | None = None
    functions: list[Path] | None = None
    stream: bool | None = None
    sandbox: str | None = None
    vision: bool | None = None
    options: list[str] | None = None
    yes: bool = False
    approvals: str | None = None
    max_cost: float | None = None
    token_budget: int | None = None
    otel: bool = False
    plan: bool = False
    reflect: bool = False
    code: bool = False


def join_option_pairs(argv: list[str]) -> list[str]:
    """`-o KEY VALUE` as `-o KEY=VALUE`, which is what the option parser takes (click options take a fixed
    number of values, and typer offers no repeatable pair); and a bare `--ray` (no address after it: the end,
    an option, or a word that is not `auto`, `local` or HOST:PORT, such as a suite's path) as `--ray auto`."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return out + argv[i:]
        if arg in ("-o", "--option") and i + 2 < len(argv) and "=" not in argv[i + 1]:
            out += [arg, f"{argv[i + 1]}={argv[i + 2]}"]
            i += 3
            continue
        if arg == "--ray" and (i + 1 == len(argv) or not _ray_address(argv[i + 1])):
            out += [arg, "auto"]
            i += 1
            continue
        out.append(arg)
        i += 1
    return out


def _ray_address(word: str) -> bool:
    return word in ("auto", "local") or (":" in word and "/" not in word and not word.startswith("-"))


def model_options(items: Sequence[str]) -> dict[str, str]:
    """`-o KEY=VALUE` items as setting overrides: the model options, or any other setting by its name."""
    from ..settings import MODEL_OPTIONS, setting_fields

    known = set(setting_fields()) - {"workspace"}
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"-o {item}: give a key and a value, e.g. -o temperature 0.2")
        name = key.strip().lower().replace("-", "_")
        if name not in known:
            raise UserError(f"-o {key}: not a model option ({', '.join(MODEL_OPTIONS)}) nor a setting "
                            "(`shou config` lists them)")
        out[name] = value
    return out


def continued(session: str | None, continue_: bool, workspace: Path | None) -> str | None:
    """The session to run in: `--session`, or with `--continue` the workspace's latest one."""
    if not continue_:
        return session
    if session is not None:
        raise fail("give --session NAME or --continue, not both")
    from .sessions import latest_session

    latest = latest_session((workspace or Path.cwd()).resolve())
    if latest is None:
        raise fail("--continue: this workspace has no session yet")
    err.print(f"[dim]continuing session {escape(latest)}[/]")
    return latest


# Parsing the flags and building an agent make ~70,000 tracked objects that live as long as the process
# (modules, classes, the tools and their schemas): the cyclic collector's passes over them while they are made
# free little and cost ~80 ms of a one-step run's ~600 ms of CPU. So `run`, `resume` and `chat` start with it
# off, and it is back on once the agent is built, before any task work, or when the command ends whatever
# happened. What start-up made is frozen (gc.freeze) first: left in the youngest generation, all of it would be
# walked by the first collection of the task. The price is start-up's own cyclic garbage, frozen with the rest
# rather than freed: ~1,300 small objects (~200 KB) in a one-step run, once per process. Cycles made from then
# on are collected as always.
_startup_gc_off = False


@contextmanager
def startup_gc(off: bool) -> Iterator[None]:
    """Run a command with the cyclic garbage collector off until `build_agent` is done (if `off`)."""
    global _startup_gc_off
    if off and gc.isenabled():
        gc.disable()
        _startup_gc_off = True
    try:
        yield
    finally:
        _end_startup_gc()


def _end_startup_gc() -> None:
    global _startup_gc_off
    if _startup_gc_off:
        _startup_gc_off = False
        gc.freeze()  # start-up's objects are the process's for good: later passes need not walk them
        gc.enable()


def build_agent(opts: Options, *, open_store: bool = True):  # -> tuple[Agent, Settings]
    """Settings, model, tools and store for a run or chat; raises `ShouError` on a bad setup."""
    try:
        return _build_agent(opts, open_store)
    finally:
        _end_startup_gc()


def _build_agent(opts: Options, open_store: bool):  # -> tuple[Agent, Settings]
    from ..agent.build import agent_from_settings
    from ..config import load_settings
    from .answer import choose_ask_user
    from .approve import choose_approvals

    settings = load_settings({
        "model": opts.model, "base_url": opts.base_url, "provider": opts.provider, "max_steps": opts.max_steps,
        "workspace": opts.workspace, "tools": opts.tools, "stream": opts.stream, "sandbox": opts.sandbox,
        "vision": opts.vision, "approvals": opts.approvals, "max_cost": opts.max_cost,
        "token_budget": opts.token_budget, **model_options(opts.options or ()),
    })
    approvals = choose_approvals(settings.approvals, opts.yes)
    agent = agent_from_settings(
        settings, functions=opts.functions or (), store="workspace" if open_store else None,
        approvals=approvals, ask_user=choose_ask_user(settings, approvals), warn=_warn,
        observers=lambda store: observers(settings, opts.otel, store),  # the alert monitor starts from its log
        planning=opts.plan, reflect=opts.reflect, code_mode=opts.code,
    )
    return agent, settings


def _warn(message: str) -> None:
    from ..agent.build import LOCAL_HINT

    if message == LOCAL_HINT:
        err.print(f"[dim]{escape(message)}[/]")
    else:
        err.print(f"[yellow]warning:[/] {escape(message)}")


async def close_resources(agent) -> None:
    """Close what a run may have opened: the model's connections, browsers (only if one was imported)."""
    await agent.model.aclose()
    if agent.mcp_servers:
        from ..mcp import close_all

        await close_all()
    if "shou.tools.builtin.browser" in sys.modules:
        from ..tools.builtin.browser import close_browsers

        await close_browsers()
