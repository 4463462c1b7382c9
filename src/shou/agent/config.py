"""AgentConfig: everything an agent is configured with, as one immutable value.

Built in one place from settings (`AgentConfig.from_settings`, the fields read by shou.agent.settings_fields),
or from the Python API's keywords (`Agent(model, tools, max_steps=3)`). Variants (a plan step, a sub-agent, a
server request's options) are `dataclasses.replace(config, ...)`; a limit from a less trusted source goes
through `narrow()`, which can only lower it. Checked once, in `__post_init__`, so a config that exists is a valid one.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from ..context.builder import ContextPolicy
from ..errors import UserError
from ..events import Event
from ..known_secrets import environment_version, secrets_of
from ..models.base import Model, ModelSettings
from ..models.capabilities import supports_vision
from ..models.named import model_named
from ..pricing import PriceTable
from ..redact import Redactor
from ..tools.registry import ToolSet
from .limits import MAX_TASK_CHARS
from .output import OutputSpec, output_spec
from .settings_fields import _settings_fields

if TYPE_CHECKING:
    from ..a2a.spec import RemoteAgentSpec
    from ..mcp.servers import ServerSpec
    from ..permissions import Policy
    from ..skills import SkillSet
    from ..store.sqlite import SQLiteStore
    from .approvals import Approver
    from .asking import Asker
    from .budget import Budget
    from .delegate import AgentSpec
    from .guardrails import Guardrail

__all__ = ["DEFAULT_INSTRUCTIONS", "DEFAULT_POLICY", "MAX_TASK_CHARS", "NARROWABLE", "AgentConfig", "made_config",
           "model_named", "narrow"]

DEFAULT_INSTRUCTIONS = (
    "You are shou, an agent that completes the user's task by calling tools when they help, then "
    "answering. Use the tools' results rather than guessing; when the task is done, reply with the "
    "final answer in plain text."
)
DEFAULT_POLICY = ContextPolicy()
# Limits where lower is stricter: what a request, a tenant's quota or a named agent may only narrow.
NARROWABLE = ("max_steps", "run_timeout", "tool_timeout", "max_parallel_tools", "repeat_limit", "token_budget",
              "max_cost", "max_replans", "plan_step_max_steps", "plan_step_timeout", "max_reviews")
_RESOLVED: dict[str, Path] = {}
_BUILT_IN_PRICES = PriceTable()  # no [models] table to add: every config without one shares the built-in prices


def _spec_of(output_type: Any) -> OutputSpec:
    """The spec of an output type, made once per type: a variant of a config (a request's, a sub-run's) keeps it."""
    try:
        return _cached_spec(output_type)
    except TypeError:  # unhashable (a raw schema): made anew
        return output_spec(output_type)


_cached_spec = functools.lru_cache(maxsize=64)(output_spec)


def _resolved(workspace: str | Path | None) -> Path:
    """The absolute workspace path; resolving is a system call, so configs built in a loop share it."""
    key = str(workspace) if workspace is not None else str(Path.cwd())
    path = _RESOLVED.get(key)
    if path is None:
        path = _RESOLVED[key] = Path(key).resolve()
        if len(_RESOLVED) > 1024:
            _RESOLVED.clear()
    return path


@dataclass(frozen=True, slots=True, eq=False)
class AgentConfig:
    """A model with its tools, instructions, limits, policy, budgets, context, sandbox and store.

    `model` is a `Model` or a spec such as `"deepseek:deepseek-chat"`. Guards: `max_steps` model calls,
    `run_timeout` seconds of wall time, `repeat_limit` identical consecutive calls; budgets: `token_budget`
    tokens and `max_cost` US dollars per run, checked before each model call against its worst case
    (`prices`, default: the built-in prices with the settings' `[models."NAME"]` over them). `summary_model`
    writes compaction summaries. `tool_timeout` limits every tool call whatever the tool declares (None: a
    tool's own `@tool(timeout=...)` or 30 s; `shell` and `run_code` the sandbox's limit). `vision`: whether the
    model may be sent images (None: known vision models). `policy` decides which calls run, ask or are
    refused (default: the settings' `[permissions]`); `approvals` answers the asks: an `Approver`, "yes",
    "deny" (the default) or "defer". `ask_user` offers the `ask_user` tool and says how its questions are put:
    an `Asker` (the terminal), "defer" (the run stops `waiting_input` until answered) or None (not offered,
    the default; shou.agent.asking). `observers` see every event after it is logged. `shared_budgets` are
    budgets other runs hold their calls against too (an evaluation's `--max-cost`): a call must fit them all.

    Composition: `planning` (`max_replans`, `plan_step_max_steps`, `plan_step_timeout`), `reflect`
    (`review_model`, `max_reviews`), `delegation` with named `agents`, `skills`, `mcp_servers`, remote A2A
    agents (`a2a_agents`), and `code_mode` (one `python` tool whose code calls the others). `guardrails`
    (agent/guardrails.py) are checks on a run's task and answer that end it `blocked`. `output_type`: the type
    (or `JsonSchema`) the final answer must be, retried `output_retries` times (agent/output.py).

    Derived once, never set: `offered` (the tools the model is offered: `tools`, plus `use_skill` and
    `delegate` when enabled, `handoff` when an agent has `handoff` set, or `python` alone in code mode),
    `code_tools` (what code calls in code mode), `output` (the spec of `output_type`) and `redactor` (the
    secrets of `settings`, of the MCP servers and of the A2A agents; a variant keeps its parent's).
    """

    model: Model
    tools: ToolSet = field(default_factory=ToolSet)
    instructions: str = DEFAULT_INSTRUCTIONS
    max_steps: int = 20
    run_timeout: float = 300.0
    tool_timeout: float | None = None
    max_parallel_tools: int = 4
    repeat_limit: int = 3
    token_budget: int | None = None
    max_cost: float | None = None
    workspace: Path = field(default_factory=Path.cwd)
    model_settings: ModelSettings | None = None
    store: SQLiteStore | None = None
    settings: Any = None
    context: ContextPolicy = DEFAULT_POLICY
    memory: Any = None
    vision: bool | None = None
    policy: Policy | None = None
    approvals: Approver | Literal["yes", "deny", "defer"] = "deny"
    ask_user: Asker | Literal["defer"] | None = None
    observers: tuple[Callable[[Event], Any], ...] = ()
    prices: PriceTable | None = None
    summary_model: Model | None = None
    planning: bool = False
    max_replans: int = 2
    plan_step_max_steps: int = 8
    plan_step_timeout: float = 120.0
    reflect: bool = False
    max_reviews: int = 1
    review_model: Model | None = None
    agents: Mapping[str, AgentSpec] = field(default_factory=dict)
    delegation: bool = False
    skills: SkillSet | None = None
    mcp_servers: Mapping[str, ServerSpec] = field(default_factory=dict)
    a2a_agents: Mapping[str, RemoteAgentSpec] = field(default_factory=dict)
    code_mode: bool = False
    output_type: Any = None
    output_retries: int = 2
    shared_budgets: tuple[Budget, ...] = ()
    guardrails: tuple[Guardrail, ...] = ()
    # What a caller gave besides the task (an OpenAI-style request's system messages and earlier turns): the
    # input guardrails check it with the task, or they would see "go ahead" and not what it agrees to.
    checked_input: str = ""
    redactor: Redactor | None = field(default=None, repr=False)
    offered: ToolSet = field(init=False, repr=False)
    output: OutputSpec | None = field(init=False, repr=False)
    code_tools: ToolSet = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._resolve()
        self._check()
        self._derive()

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # frozen: only __post_init__ puts values in their final form

    def _resolve(self) -> None:
        """Names and defaults to the values they stand for (a model spec to a model, a path made absolute)."""
        model = self.model
        if isinstance(model, str):
            from ..models import get_model

            model = get_model(model)
            self._set("model", model)
        if not hasattr(model, "stream"):
            raise UserError(f"model must be a Model (with a stream() method) or a model spec string, not {model!r}")
        if not isinstance(self.tools, ToolSet):
            self._set("tools", ToolSet(self.tools))
        if self.instructions is None:
            self._set("instructions", DEFAULT_INSTRUCTIONS)
        self._set("workspace", _resolved(self.workspace))
        if self.vision is None:
            self._set("vision", supports_vision(model.name))
        if self.prices is None:
            models = getattr(self.settings, "models", None)
            self._set("prices", PriceTable(models) if models else _BUILT_IN_PRICES)
        for name in ("summary_model", "review_model"):
            if isinstance(getattr(self, name), str):
                self._set(name, model_named(getattr(self, name), self.settings))
        if self.context is None:
            self._set("context", DEFAULT_POLICY)
        for name in ("agents", "mcp_servers", "a2a_agents"):  # read-only views: a variant never shares a table
            value = getattr(self, name)
            if not isinstance(value, MappingProxyType):
                self._set(name, MappingProxyType(dict(value or {})))
        if not isinstance(self.observers, tuple):
            self._set("observers", tuple(self.observers))
        if self.guardrails:  # a judge named by a string is resolved now: a wrong name fails here, not mid-run
            self._set("guardrails", tuple(replace(g, model=model_named(g.model, self.settings))
                                          if isinstance(g.model, str) else g for g in _guardrails(self.guardrails)))

    def _check(self) -> None:
        if self.max_steps < 1 or self.run_timeout <= 0 or (self.tool_timeout is not None and self.tool_timeout <= 0) \
                or self.max_parallel_tools < 1 or self.repeat_limit < 1:
            raise UserError(
                "max_steps, run_timeout, tool_timeout, max_parallel_tools and repeat_limit must be positive"
            )
        if (self.token_budget is not None and not 1 <= self.token_budget < math.inf) or \
                (self.max_cost is not None and not 0 <= self.max_cost < math.inf):  # NaN fails both: it is no limit
            raise UserError("token_budget must be positive and max_cost a number of US dollars, not negative")
        if self.max_replans < 0 or self.plan_step_max_steps < 1 or self.plan_step_timeout <= 0 or self.max_reviews < 0:
            raise UserError("max_replans and max_reviews must not be negative; plan_step_max_steps and "
                            "plan_step_timeout must be positive")
        if self.output_retries < 0:
            raise UserError("output_retries must not be negative")
        if self.output_type is not None and self.planning:
            raise UserError("a typed answer (output_type) cannot be asked of a planned run (planning) yet")

    def _derive(self) -> None:
        self._set("output", _spec_of(self.output_type) if self.output_type is not None else None)
        if self.redactor is None:
            # The MCP servers' and A2A agents' tables are secret sources too (their keys, logins, tokens).
            specs = [*self.mcp_servers.values(), *self.a2a_agents.values()]
            self._set("redactor", Redactor([*secrets_of(self.settings),
                                            *(v for spec in specs for v in spec.secrets())]))
        tools = self.tools
        skills = self.skills
        if skills is not None and skills.skills and "use_skill" not in tools.names:
            tools = ToolSet([*tools, skills.tool()])
        # In code mode a question could not stop the run (the code's call would wait inside a finished one):
        # only a terminal, which answers at once, asks there.
        if self.ask_user is not None and "ask_user" not in tools.names and not (
                self.code_mode and self.ask_user == "defer"):
            from ..tools.builtin.ask_user import ask_user

            tools = ToolSet([*tools, ask_user])
        if self.delegation and "delegate" not in tools.names:
            from .delegate import delegate_tool

            tools = ToolSet([*tools, delegate_tool(self.agents)])
        if "handoff" not in tools.names and any(spec.handoff for spec in self.agents.values()):
            from .handoff import handoff_tool

            tools = ToolSet([*tools, handoff_tool(self.agents)])
        self._set("code_tools", tools)
        if self.code_mode:
            from .code import python_tool

            tools = ToolSet([python_tool(tools)])
        self._set("offered", tools)

    @classmethod
    def from_settings(cls, settings: Any, **overrides: Any) -> AgentConfig:
        """The config `settings` ask for; `overrides` are AgentConfig fields given otherwise (the model when
        built already, the store, observers, approvals). `tools` default to the built-in ones; `settings.tools`
        narrows whichever are given."""
        check_fields(overrides, "AgentConfig.from_settings()")
        fields_ = {**_settings_fields(settings), **overrides}
        if "model" not in fields_:
            from ..models import build_model

            fields_["model"] = build_model(settings)
        if "tools" not in fields_:
            from ..tools.builtin import builtin_tools

            fields_["tools"] = builtin_tools()
        if settings.tools is not None:  # delegate, use_skill and handoff are added by the config, when offered
            fields_["tools"] = ToolSet(fields_["tools"]).only(
                [n for n in settings.tools if n not in ("delegate", "use_skill", "handoff", "ask_user")])
        return cls(**fields_)


def _guardrails(given: Any) -> tuple[Guardrail, ...]:
    """`guardrails` as a tuple of `Guardrail`s (a bare function is an input guardrail); a `UserError` otherwise."""
    from .guardrails import Guardrail

    if isinstance(given, Guardrail) or callable(given) or isinstance(given, str):
        given = (given,)
    out = []
    for g in given:
        if not isinstance(g, Guardrail) and callable(g):
            g = Guardrail(g, "input")
        if not isinstance(g, Guardrail):
            raise UserError(f"guardrails must be Guardrail objects (@input_guardrail, @output_guardrail, "
                            f"Guardrail.judged) or functions, not {g!r}")
        out.append(g)
    return tuple(out)


FIELDS = frozenset(f.name for f in fields(AgentConfig) if f.init)


_MADE: dict[tuple[Any, ...], tuple[AgentConfig, tuple[Any, ...]]] = {}
_MADE_MOST = 64
_PLAIN = (str, int, float, bool, type(None), Path)
_MUTABLE = (list, dict, set, bytearray)


def made_config(model: Any, tools: Any, instructions: str | None, fields: Mapping[str, Any]) -> AgentConfig:
    """`AgentConfig(model, tools, instructions, **fields)`, or the one made a moment ago from the same arguments:
    a config is frozen, so agents made in a loop (one per request, per task) with the same model, tools and
    settings share it instead of deriving it again (most of an Agent's making, bench/README). The same means the
    same objects (the model, each tool, the settings, the store...) and equal plain values, in a process whose
    environment's secrets have not changed since; the objects are held by the entry, so an id is never taken by
    another object while the entry lives. Anything unusual (an unhashable value) is simply made anew."""
    values = []
    for k, v in fields.items():
        if isinstance(v, _MUTABLE):
            return AgentConfig(model, tools, instructions, **fields)  # may change after: never taken by identity
        values.append((k, v if isinstance(v, _PLAIN) else id(v)))
    values.sort()  # the same keywords in another order are the same config
    try:
        tool_ids = tuple(map(id, tools)) if not isinstance(tools, ToolSet) else (id(tools),)
        key = (id(model), tool_ids, instructions, tuple(values), environment_version())
        hash(key)
    except TypeError:
        return AgentConfig(model, tools, instructions, **fields)
    held = _MADE.get(key)
    if held is not None:
        return held[0]
    config = AgentConfig(model, tools, instructions, **fields)
    if len(_MADE) >= _MADE_MOST:
        _MADE.pop(next(iter(_MADE)))
    _MADE[key] = (config, (model, tuple(tools) if not isinstance(tools, ToolSet) else tools, tuple(fields.values())))
    return config


def check_fields(names: Iterable[str], where: str = "Agent()") -> None:
    """A TypeError naming the first of `names` that is no AgentConfig field."""
    for name in names:
        if name not in FIELDS:
            raise TypeError(f"{where} got an unexpected keyword argument {name!r}: not an AgentConfig field "
                            f"(known: {', '.join(sorted(FIELDS))})")


def narrow(config: AgentConfig, **limits: Any) -> AgentConfig:
    """`config` with `limits` (of `NARROWABLE`) applied where they are lower; a higher one, or None, leaves
    the limit as it is (a less trusted source may only tighten). An unset limit (None) takes the one asked."""
    changes = {}
    for name, asked in limits.items():
        if name not in NARROWABLE:
            raise TypeError(f"narrow() cannot change {name!r}: only the limits {', '.join(NARROWABLE)}")
        if asked is None:
            continue
        current = getattr(config, name)
        value = asked if current is None else min(current, asked)
        if value != current:
            changes[name] = value
    return replace(config, **changes) if changes else config
