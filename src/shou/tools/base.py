"""Tools: the `@tool` decorator, the `Tool` class, `ToolResult` and the `ToolContext` tools may ask for.

A tool's JSON schema comes from its signature: type hints give the types (through pydantic), the
docstring gives the description and, from its `Args:` section (or `:param x:` lines), the parameter
descriptions. A tool built at run time (`Tool(name, description, parameters, handler)`) brings its own
JSON schema and is validated against it with `jsonschema`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import json
import os
import re
import signal
import time
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import UserError
from ..frozen import fast_init
from ..messages import ImagePart
from ..wellformed import well_formed_text
from .describe import clean_schema, parse_docstring
from .threads import run_in_daemon_thread

if TYPE_CHECKING:
    from ..checkpoints import CallRecorder
    from ..events import Event
    from ..workspace import Opened

__all__ = ["RunEvents", "Tool", "ToolArgumentsError", "ToolContext", "ToolResult", "run_in_daemon_thread", "tool"]

NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
QUICK_CALL = 0.0005  # a sync call that took less (hand-off included) is waited for on the spot next time...
QUICK_WAIT = 0.001  # ...for at most this long, the loop blocked


@fast_init
@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool gives back: `content` for the model, an optional image, and `details` for people.

    `untrusted` says this result carries outside content although the tool is not always marked
    `untrusted_output` (code whose interpreter holds a fetched page): the model gets it inside the same
    untrusted-content delimiters, and a spill of it is saved as untrusted. A tool can only add the mark.
    """

    content: str
    image: ImagePart | None = None
    is_error: bool = False
    details: dict[str, Any] | None = None
    untrusted: bool = False

    @classmethod
    def error(cls, message: str, details: dict[str, Any] | None = None) -> ToolResult:
        """An error result; the model sees `message`."""
        return cls(message, is_error=True, details=details)

    @classmethod
    def coerce(cls, value: Any) -> ToolResult:
        """Turn whatever a tool returned into a result: text as is, other values as JSON. Text no UTF-8 encodes
        (a file name's undecodable bytes, as `os.listdir` gives them) has U+FFFD for each lone surrogate, here,
        before the controls cap, spill or mark it: none of them, nor the log, could take it."""
        if isinstance(value, ToolResult):
            content = well_formed_text(value.content)
            return value if content is value.content else dataclasses.replace(value, content=content)
        if isinstance(value, str):
            return cls(well_formed_text(value))
        if value is None:
            return cls("(no output)")
        if isinstance(value, ImagePart):
            return cls("(image)", image=value)
        dump = getattr(value, "model_dump_json", None)
        if callable(dump):
            return cls(well_formed_text(dump()))
        return cls(well_formed_text(json.dumps(value, ensure_ascii=False, default=str)))


class RunEvents(Protocol):
    """What a tool that works for a while may add to its run's event stream (the run, shou.agent.loop.Run,
    is one): events through the run's emitter, the one way every event goes (redacted, logged, observed,
    streamed), with the run's id and current step. A tool that calls another agent reports it as a sub-run
    of its own (`sub_id()`, events with `parent=run_id`), so people see it as they see a sub-agent."""

    run_id: str
    step: int

    def emit(self, event: Event) -> None:
        """Hand `event` to the run's emitter."""
        ...

    def commit(self) -> None:
        """Make what was emitted durable now, so streams of the run show it while the tool still works."""
        ...

    def sub_id(self) -> str:
        """A new id for a sub-run of this run (`RUN.N`)."""
        ...


@dataclass(slots=True)
class ToolContext:
    """What a tool can ask for by taking a parameter annotated `ToolContext`."""

    workspace: Path
    session: str = ""
    run_id: str = ""
    settings: Any = None
    state: dict[str, Any] = field(default_factory=dict)
    # What the session's resources (browser context, interpreter, spilled outputs) are kept under: an id
    # unique to this session forever (`Session.key`), so a later session of the same name, maybe another
    # user's, never finds them.
    session_key: str = ""
    # Where `read_file` may read outside the workspace: a function that opens the file a path names (a user
    # skill's file) read-only, or returns None when the path is not its business. Whoever builds the
    # context passes it (the agent: shou.skills.open_user_skill_file), so the file tools know no skills.
    read_outside: Callable[[str], Opened | None] | None = None
    # The run's event stream, for a tool that reports progress (RunEvents); None outside a run.
    events: RunEvents | None = None
    # Where a tool that changes workspace files records them first (shou undo); the run gives each call its own
    # (agent/checkpointing.py). None: nothing is recorded (outside a stored run, checkpoints off).
    checkpoint: CallRecorder | None = None

    @property
    def resource_key(self) -> str:
        """The key of this session's resources: `session_key`, or the session's name when it has none."""
        return self.session_key or self.session

    async def run_process(
        self, *argv: str, input: bytes | None = None, cwd: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> tuple[int, bytes, bytes]:
        """Run a program in its own process group; returns (exit code, stdout, stderr).

        If the tool is cancelled (its timeout passed, the run was stopped) the whole process group is
        killed, so no grandchild outlives the call.
        """
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            cwd=str(cwd or self.workspace), env=env, start_new_session=True,
        )
        try:
            out, err = await proc.communicate(input)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise
        return proc.returncode or 0, out, err


class ToolArgumentsError(ValueError):
    """The arguments do not fit the tool's schema; the message says precisely how."""


Handler = Callable[..., Any] | Callable[..., Awaitable[Any]]


class Tool:
    """A callable the model may use: name, description, JSON schema for the arguments, handler.

    Build one directly for tools made at run time (`parameters` is a JSON schema object), or with
    `@tool` from a typed function. `timeout` (seconds) overrides the run's default; `approval="ask"` (or
    `requires_approval=True`) marks a dangerous tool: the permission policy asks a person before it runs
    (shou.permissions); `untrusted_output` marks output from outside (web pages, search results) that the
    model gets inside untrusted-content delimiters; `idempotent` says that running a call twice does no harm, so a
    call interrupted by a crash is simply run again on resume (otherwise the model is told its outcome is
    unknown).
    """

    __slots__ = (
        "_model", "_quick", "_spec", "_validator", "approval", "context_param", "description", "handler", "idempotent",
        "is_async", "name", "parameters", "requires_approval", "timeout", "untrusted_output",
    )

    def __init__(
        self, name: str, description: str, parameters: dict[str, Any] | None, handler: Handler, *,
        timeout: float | None = None, requires_approval: bool = False, context_param: str | None = None,
        idempotent: bool = False, approval: str | None = None, untrusted_output: bool = False,
    ) -> None:
        if not NAME_RE.match(name):
            raise UserError(f"tool name {name!r} must be 1-64 letters, digits, '_' or '-'")
        if not callable(handler):
            raise UserError(f"tool {name!r}: handler must be callable")
        self.name = name
        self.description = description
        self.parameters = parameters or {"type": "object", "properties": {}}
        if self.parameters.get("type") != "object":
            raise UserError(f"tool {name!r}: parameters must be a JSON schema with type 'object'")
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler)
        self.timeout = timeout
        if approval not in (None, "ask"):
            raise UserError(f"tool {name!r}: approval must be 'ask' or None, not {approval!r}")
        self.approval = "ask" if requires_approval else approval
        self.requires_approval = self.approval == "ask"
        self.untrusted_output = untrusted_output
        self.idempotent = idempotent
        self.context_param = context_param
        self._model: Any = None
        self._validator: Any = None
        self._spec: dict[str, Any] | None = None
        self._quick = False  # whether its last call answered within QUICK_CALL (a sync handler's)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    def spec(self) -> dict[str, Any]:
        """The wire form the model is offered (`{"type": "function", ...}`), built once."""
        if self._spec is None:
            self._spec = {
                "type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
            }
        return self._spec

    def validate(self, args: dict[str, Any]) -> dict[str, Any]:
        """Check `args` against the schema and return the keyword arguments for the handler."""
        if self._model is not None:
            from pydantic import ValidationError

            try:
                parsed = self._model.model_validate(args)
            except ValidationError as e:
                raise ToolArgumentsError(_pydantic_message(e)) from None
            return {name: getattr(parsed, name) for name in type(parsed).model_fields}
        if self._validator is None:
            import jsonschema

            from . import schema_bounds
            from .schema_regex import install

            install()  # patterns are searched in linear time: a schema may come from an MCP server
            schema_bounds.install()  # and uniqueItems checked in linear time
            cls = jsonschema.validators.validator_for(self.parameters)
            self._validator = cls(self.parameters)
        from .schema_regex import UnsafePattern

        try:
            errors = sorted(self._validator.iter_errors(args), key=lambda e: list(e.absolute_path))
        except UnsafePattern as e:
            raise ToolArgumentsError(f"the tool's schema cannot be checked: {e}") from None
        except RecursionError:  # a recursive schema ($ref) and arguments nested as deep as the model likes
            raise ToolArgumentsError("the arguments nest too deeply to check against the schema") from None
        if errors:
            lines = []
            for err in errors[:10]:
                where = ".".join(str(p) for p in err.absolute_path)
                lines.append(f"- {where + ': ' if where else ''}{err.message}")
            raise ToolArgumentsError("arguments do not match the schema:\n" + "\n".join(lines))
        return args

    async def call(self, args: dict[str, Any], ctx: ToolContext | None) -> Any:
        """Run the handler with validated `args` (async handlers awaited, sync ones in a thread)."""
        if self.context_param:
            args = {**args, self.context_param: ctx}
        if self.is_async:
            return await self.handler(**args)
        # Waited for on the spot while it keeps answering quickly (tools/threads.py): a hand-off to the
        # worker and back through the loop costs more than most small functions take.
        start = time.perf_counter()
        try:
            return await run_in_daemon_thread(self.handler, args, QUICK_WAIT if self._quick else 0.0)
        finally:
            self._quick = time.perf_counter() - start < QUICK_CALL


def _pydantic_message(err: Any) -> str:
    lines = []
    for e in err.errors(include_url=False):
        loc = ".".join(str(p) for p in e["loc"])
        got = "" if e["type"] == "missing" else f" (got {json.dumps(e.get('input'), default=str)[:80]})"
        if e["type"] == "extra_forbidden":
            lines.append(f"- {loc}: unexpected argument")
        else:
            lines.append(f"- {loc}: {e['msg']}{got}")
    return "arguments do not match the schema:\n" + "\n".join(lines)


# ---------------------------------------------------------------- @tool: schema from the signature


def tool(
    func: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None,
    timeout: float | None = None, requires_approval: bool = False, idempotent: bool = False,
    approval: str | None = None, untrusted_output: bool = False,
) -> Any:
    """Make a `Tool` from a typed function: `@tool` or `@tool(name=..., timeout=..., idempotent=True,
    approval="ask")`. Arguments are validated before the tool runs: pydantic types and validators
    (`Annotated[str, AfterValidator(check)]`, `Field(pattern=...)`) refuse bad ones with their reason.

    Every parameter needs a type hint; a parameter annotated `ToolContext` is filled in by shou and
    is not part of the schema. All declaration problems are reported together in one `UserError`.
    """

    def wrap(fn: Callable[..., Any]) -> Tool:
        made = _tool_from_function(fn, name, description, timeout, requires_approval or approval == "ask")
        if approval not in (None, "ask"):
            raise UserError(f"tool {made.name!r}: approval must be 'ask' or None, not {approval!r}")
        made.idempotent = idempotent
        made.untrusted_output = untrusted_output
        return made

    return wrap(func) if func is not None else wrap


def _tool_from_function(
    fn: Callable[..., Any], name: str | None, description: str | None, timeout: float | None,
    requires_approval: bool,
) -> Tool:
    from pydantic import ConfigDict, Field, create_model

    tool_name = name or fn.__name__
    summary, param_docs = parse_docstring(inspect.getdoc(fn) or "")
    hints = _parameter_hints(fn, tool_name)
    problems: list[str] = []
    fields: dict[str, Any] = {}
    context_param = None
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            problems.append(f"*{pname}/**{pname} parameters cannot be described to a model")
            continue
        hint = hints.get(pname)
        if hint is ToolContext:
            context_param = pname
            continue
        if hint is None:
            problems.append(f"parameter {pname!r} has no type hint")
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        doc = param_docs.get(pname)
        # Passing description=None would wipe a description given with Annotated[..., Field(...)].
        fields[pname] = (hint, Field(default, description=doc) if doc else Field(default))
    if not (description or summary):
        problems.append("no description: give it a docstring or description=")
    unknown_docs = set(param_docs) - set(fields) - {context_param}
    if unknown_docs:
        problems.append(f"docstring describes parameters that do not exist: {sorted(unknown_docs)}")
    if problems:
        raise UserError(f"tool {tool_name!r} is not valid:\n" + "\n".join(f"- {p}" for p in problems))
    try:
        model = create_model(f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        schema = clean_schema(model.model_json_schema())
    except Exception as e:
        raise UserError(f"tool {tool_name!r}: cannot build a JSON schema from its hints: {e}") from e
    t = Tool(tool_name, description or summary, schema, fn, timeout=timeout,
             requires_approval=requires_approval, context_param=context_param)
    t._model = model
    return t


def _parameter_hints(fn: Callable[..., Any], tool_name: str) -> dict[str, Any]:
    """The parameters' type hints. The return annotation is not needed for the schema, so one that does not
    resolve (say, a type imported inside a function, under `from __future__ import annotations`) is ignored."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        pass
    hints: dict[str, Any] = {}
    for name, param in inspect.signature(fn).parameters.items():
        ann = param.annotation
        if ann is inspect.Parameter.empty:
            continue
        if isinstance(ann, str):
            try:
                ann = eval(ann, getattr(fn, "__globals__", {}))  # what typing.get_type_hints does, one at a time
            except Exception as e:
                raise UserError(f"tool {tool_name!r}: cannot resolve the type hint of {name!r}: {e}") from e
        hints[name] = ann
    return hints
