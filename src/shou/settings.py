"""Every setting shou reads, declared once: name, type, default, variable, help, and what it may do.

A setting is a field of `Settings`. Its type annotation decides how a value from a flag, a variable
(`SHOU_<NAME>` unless declared otherwise), `.env` or `shou.toml` is converted; its metadata says what it
is for (`shou config` lists them all), whether it is a secret (masked), whether an untrusted workspace
file may set it (`safe`), and its bounds. config.py merges the sources; nothing else keeps a list of names.
"""

from __future__ import annotations

import functools
import json
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from .errors import ConfigError
from .setting_tables import TABLES, named_tables, price_tables

__all__ = ["MODEL_OPTIONS", "SANDBOX_BACKENDS", "SECRET_FIELDS", "Settings", "convert", "env_names", "setting_fields"]

SANDBOX_BACKENDS = ("auto", "bubblewrap", "docker", "local")
# Settings a person may pass with `-o KEY VALUE` (per-request model options).
MODEL_OPTIONS = ("temperature", "max_tokens", "top_p", "seed")


def _s(default: Any, help: str, *, env: str | None = None, safe: bool = False, secret: bool = False,
       minimum: float | None = None, positive: bool = False, maximum: float | None = None) -> Any:
    return field(default=default, metadata={"help": help, "env": env, "safe": safe, "secret": secret,
                                            "minimum": minimum, "positive": positive, "maximum": maximum})


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a run can be configured with. Build it with `load_settings()`."""

    model: str | None = _s(None, "model, as PROVIDER:MODEL, MODEL, local: or scripted:FILE")
    provider: str | None = _s(None, "provider preset: openai, deepseek, qwen, ollama, vllm, llamacpp, custom")
    base_url: str | None = _s(None, "any OpenAI-compatible endpoint")
    api_key: str | None = field(default=None, repr=False, metadata={"help": "key for base_url", "secret": True})
    workspace: Path = field(default_factory=Path.cwd, metadata={"help": "folder the file tools work in"})
    max_steps: int = _s(20, "most model calls in one run", minimum=1)
    run_timeout: float = _s(300.0, "seconds a run may take", positive=True)
    tool_timeout: float = _s(30.0, "seconds any one tool call may take (shell and run_code included)", positive=True)
    max_parallel_tools: int = _s(4, "tool calls of one step run at once", minimum=1)
    token_budget: int | None = _s(None, "most tokens (input + output) one run may use, checked before each model "
                                        "call against its worst case", minimum=1)
    max_cost: float | None = _s(None, "most US dollars one run may spend, checked before each model call (needs "
                                      "the model's price)", minimum=0)
    session_token_budget: int | None = _s(None, "most tokens all runs of one session may use", minimum=1)
    session_max_cost: float | None = _s(None, "most US dollars all runs of one session may spend", minimum=0)
    models: dict[str, dict[str, float]] = field(default_factory=dict, metadata={
        "help": 'per model: [models."NAME"] input_price, cached_input_price, output_price (USD per million '
                "tokens) and context_window (tokens, for a model shou does not know; SHOU_MODELS: the same as "
                "JSON)"})
    rpm: int | None = _s(None, "most requests per minute to the provider, shared by every run of the process",
                         minimum=1)
    tpm: int | None = _s(None, "most tokens per minute to the provider, shared by every run of the process",
                         minimum=1)
    model_retries: int = _s(8, "retries of a failing model request before giving up (or falling back)", minimum=0)
    fallback_models: tuple[str, ...] = _s((), "models tried in order when the model's provider keeps failing")
    summary_model: str | None = _s(None, "model that writes compaction summaries (default: the model)")
    plan_step_max_steps: int = _s(8, "most model calls of one plan step (shou run --plan)", minimum=1)
    plan_step_timeout: float = _s(120.0, "seconds one plan step may take", positive=True)
    max_replans: int = _s(2, "new plans after a failed step before a planned run gives up", minimum=0)
    output_retries: int = _s(2, "retries of a typed answer (--output-schema) that does not match its schema, before "
                                "the run ends invalid_output", minimum=0)
    max_reviews: int = _s(1, "reviews of a final answer before it stands (shou run --reflect)", minimum=0)
    review_model: str | None = _s(None, "model that reviews answers (--reflect; default: the model)")
    delegation: bool = _s(True, "offer the delegate tool (sub-agents) in shou run and chat")
    mcp_servers: dict[str, dict[str, Any]] = field(default_factory=dict, metadata={
        "help": "MCP servers whose tools are offered as NAME__TOOL: [mcp_servers.NAME] command, args, env (stdio) "
                "or url, headers (streamable HTTP), timeout (SHOU_MCP_SERVERS: the same as JSON)"})
    a2a_agents: dict[str, dict[str, Any]] = field(default_factory=dict, metadata={
        "help": "remote A2A agents offered as the tool NAME: [a2a_agents.NAME] url, headers, timeout, description "
                "(SHOU_A2A_AGENTS: the same as JSON)"})
    agents: dict[str, dict[str, Any]] = field(default_factory=dict, metadata={
        "help": "named sub-agents for delegate: [agents.NAME] instructions, model, tools, max_steps, description; "
                "handoff = true also lets the model hand the conversation over to it "
                "(SHOU_AGENTS: the same as JSON)"})
    guardrails: dict[str, dict[str, Any]] = field(default_factory=dict, metadata={
        "help": 'checks that can stop a run: [guardrails.NAME] on = "input" or "output", and function = '
                '"module:function" (trusted config only) or rule = "..." judged by a model (SHOU_GUARDRAILS: the '
                "same as JSON)"})
    cache: bool = _s(False, "answer a repeated identical model request from ~/.cache/shou (no cost)")
    trace_retention_days: float | None = _s(7.0, "days the raw requests of traces are kept; none: forever",
                                            minimum=0)
    checkpoint_max_mb: float = _s(50.0, "MB of workspace file checkpoints kept for shou undo and shou diff "
                                        "(oldest runs' dropped past it); 0 turns checkpoints off", minimum=0)
    otel: bool = _s(False, "export traces by OpenTelemetry, OTLP over HTTP (also on when "
                           "OTEL_EXPORTER_OTLP_ENDPOINT is set)")
    otel_content: bool = _s(False, "put messages, tool arguments and results in exported spans")
    alert_window: int = _s(20, "how many recent model (and tool) calls the failure alert looks at", minimum=1)
    alert_threshold: float = _s(0.5, "share of failed calls in the window that raises an alert (0 to 1)",
                                positive=True, maximum=1)
    alert_webhook: str | None = _s(None, "URL that gets a JSON POST when an alert fires")
    currency: str = _s("USD", "the currency costs are shown in (prices stay in USD; see currency_per_usd)", safe=True)
    currency_per_usd: float = _s(1.0, "units of `currency` one US dollar is worth, for showing costs", safe=True,
                                 positive=True)
    stream: bool = _s(True, "stream the model's output", safe=True)
    temperature: float | None = _s(None, "sampling temperature sent to the model", safe=True, minimum=0)
    max_tokens: int | None = _s(None, "most tokens in one model reply", minimum=1)
    top_p: float | None = _s(None, "nucleus sampling share sent to the model", safe=True, minimum=0)
    seed: int | None = _s(None, "sampling seed sent to the model (where supported)", safe=True)
    response_format: bool | None = _s(None, "typed answers use the provider's structured output (response_format "
                                            "json_schema); false: a final tool call (default: known models)",
                                      safe=True)
    tools: tuple[str, ...] | None = _s(None, "offer only these tools (comma-separated)")
    sandbox: Literal["auto", "bubblewrap", "docker", "local"] = _s("auto", "where shell and run_code run")
    sandbox_timeout: float = _s(300.0, "longest one shell/run_code call may run, whatever tool_timeout says",
                                positive=True)
    sandbox_memory_mb: int = _s(512, "memory of one sandboxed run, MB", minimum=1)
    sandbox_disk_mb: int = _s(1024, "how much one agent run's sandboxed calls may add to the disk, MB, in all",
                              minimum=1)
    sandbox_network: bool = _s(False, "let sandboxed code use the network")
    sandbox_image: str | None = _s(None, "Docker image for every language (docker backend; default: official ones)")
    vision: bool | None = _s(None, "send images to the model (default: known vision models)", safe=True)
    offline_fallback: bool = _s(True, "use the offline model when no model is configured", safe=True)
    local_threads: int = _s(1, "threads of the offline model", minimum=1)
    local_ctx: int = _s(4096, "context window of the offline model, tokens", minimum=1)
    memory_store: str | None = _s(None, "long-term memory file (default .shou/memory.db; relative to the workspace)")
    memory_embeddings: bool = _s(True, "rank memories with embeddings too (when installed)", safe=True)
    web_allow_hosts: tuple[str, ...] = _s((), "private hosts web_fetch/browser may reach (host, host:port, CIDR)")
    web_timeout: float = _s(30.0, "seconds one web request may take", positive=True)
    web_max_bytes: int = _s(5_000_000, "most bytes read from one web response", minimum=1)
    web_search_backends: tuple[str, ...] | None = _s(None, "web_search backends in order: tavily, duckduckgo, searxng")
    tavily_api_key: str | None = _s(None, "Tavily key for web_search", env="TAVILY_API_KEY", secret=True)
    searxng_url: str | None = _s(None, "SearXNG instance for web_search", env="SEARXNG_URL")
    browser_timeout: float = _s(15.0, "seconds one browser action may take (a page load: twice that)", positive=True)
    browser_executable: str | None = _s(None, "Chromium binary for the browser tool")
    browser_headless: bool = _s(True, "run the browser without a window")
    permissions_allow: tuple[str, ...] = _s((), "rules TOOL or TOOL(PATTERN) run without asking ([permissions] allow)")
    permissions_ask: tuple[str, ...] = _s((), "rules that ask a person first ([permissions] ask)")
    permissions_deny: tuple[str, ...] = _s((), "rules never allowed ([permissions] deny)")
    approvals: Literal["ask", "yes", "deny", "defer"] | None = _s(
        None, "what an ask does: ask on the terminal, yes to all, deny, or defer (stop waiting_approval); "
              "default: ask on a terminal, deny without one")
    ask_user: bool | None = _s(
        None, "offer the ask_user tool (questions back to the user): default on a terminal only; true also offers it "
              "to runs that cannot prompt (serve, batch, --approvals defer: they stop waiting_input)")
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    env: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    ignored: tuple[Any, ...] = field(default=(), compare=False, repr=False)


_BOOKKEEPING = ("sources", "env", "ignored")


@functools.cache
def setting_fields() -> dict[str, Field[Any]]:
    """The settings (bookkeeping fields aside), by name."""
    return {f.name: f for f in fields(Settings) if f.name not in _BOOKKEEPING}


SECRET_FIELDS = frozenset(name for name, f in setting_fields().items() if f.metadata.get("secret"))


@functools.cache
def env_names() -> dict[str, str]:
    """Setting name -> the environment variable that sets it."""
    return {name: f.metadata.get("env") or f"SHOU_{name.upper()}" for name, f in setting_fields().items()}


@functools.cache
def _types() -> dict[str, Any]:
    return typing.get_type_hints(Settings)


def _parts(annotation: Any) -> tuple[Any, bool]:
    """The annotation without `| None`, and whether None is allowed."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(annotation))
    return annotation, False


def convert(key: str, raw: Any, source: str) -> Any:
    """The value of setting `key` from `raw` (a string from a variable or flag, or a TOML value), checked."""
    kind, optional = _parts(_types()[key])
    if isinstance(raw, str) and kind is not Path:
        try:  # a variable or argument whose bytes are not UTF-8 holds lone surrogates no request can carry
            raw.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ConfigError(f"setting {key!r} from {source} is not valid UTF-8 (at character {e.start}); "
                              "set it as UTF-8 text") from None
    try:
        if raw is None or (optional and isinstance(raw, str) and raw.strip().lower() in ("", "none")):
            return None
        return _converter(kind)(key, kind, raw)
    except (TypeError, ValueError) as e:
        shown = raw if not isinstance(raw, dict) else "a table"
        raise ConfigError(f"setting {key!r} from {source} is invalid ({shown!r}): {e}") from None


def _converter(kind: Any) -> Callable[[str, Any, Any], Any]:
    """How a value of type `kind` is converted."""
    if kind is bool:
        return _bool
    if kind in (int, float):
        return _number
    origin = typing.get_origin(kind)
    if origin is tuple:
        return _names
    if origin is Literal:
        return _choice
    if kind is Path:
        return lambda key, kind, raw: Path(raw)
    if origin is dict:
        return _table
    return _text


def _bool(key: str, kind: Any, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _number(key: str, kind: Any, raw: Any) -> int | float:
    if isinstance(raw, bool):
        raise ValueError("expected a number")
    if isinstance(raw, float) and not math.isfinite(raw):  # NaN passes every comparison below
        raise ValueError("expected a finite number")
    value = kind(raw) if kind is float or not isinstance(raw, str) else int(raw.strip())
    if not math.isfinite(value):
        raise ValueError("expected a finite number")
    if kind is int and isinstance(raw, float) and not raw.is_integer():
        raise ValueError("expected a whole number")
    _bounds(setting_fields()[key].metadata, value)
    return value


def _bounds(meta: Mapping[str, Any], value: float) -> None:
    """ValueError when `value` is outside the setting's declared bounds."""
    if meta.get("positive") and value <= 0:
        raise ValueError("must be positive")
    minimum, maximum = meta.get("minimum"), meta.get("maximum")
    if minimum is not None and value < minimum:
        raise ValueError(f"must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise ValueError(f"must be at most {maximum}")


def _names(key: str, kind: Any, raw: Any) -> tuple[str, ...]:
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    if not all(isinstance(s, str) for s in items):
        raise ValueError("expected names separated by commas, or a list of strings")
    return tuple(s.strip() for s in items if s.strip())


def _choice(key: str, kind: Any, raw: Any) -> Any:
    if raw not in typing.get_args(kind):
        raise ValueError(f"choose one of {', '.join(typing.get_args(kind))}")
    return raw


def _table(key: str, kind: Any, raw: Any) -> dict[str, Any]:
    table = json.loads(raw) if isinstance(raw, str) else raw
    return named_tables(table, key) if key in TABLES else price_tables(table)


def _text(key: str, kind: Any, raw: Any) -> str:
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        raise ValueError("expected text")
    return str(raw)
