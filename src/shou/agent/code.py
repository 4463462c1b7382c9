"""Code as action (`Agent(code_mode=True)`, `shou run --code`): the model writes Python that calls the tools.

The model is offered one tool, `python(code)`. The code runs in the session's stateful interpreter in the
sandbox (no network, no host access), where every tool of the agent (MCP tools included) is a Python
function with its schema's parameters. A call travels over the interpreter's pipe to the host, which runs
it as a sub-run's call: validation, the permission policy, approvals, timeouts and events exactly as for a
call the model makes itself; its value comes back (decoded when it is JSON), an error is raised in the code
as `ToolError`. The observation is what the code printed plus the value of its last expression. The
python tool's description lists the tools as Python signatures with their docstrings.
"""

from __future__ import annotations

import json
import keyword
import secrets
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..events import Event, ToolCallFinished
from ..messages import ToolCall
from ..permissions import CODE_TOOL  # judged as run_code by the policy
from ..tools.base import Tool, ToolContext, ToolResult
from ..tools.registry import ToolSet
from ..tools.untrusted import UNTRUSTED_OPEN, reads_untrusted_spill

if TYPE_CHECKING:
    from .loop import Run

BACKSTOP = 24 * 3600.0  # the interpreter enforces the sandbox's time limit on the whole cell itself
INTRO = (
    "Run Python code in a persistent interpreter (variables and imports stay between calls; no network). "
    "Act by writing code: the functions below call the tools for you, and you can combine, loop over and "
    "check their results in one go. What the code prints, and the value of its last expression, come back "
    "to you. A failed or refused tool call raises ToolError. Results that are JSON come back decoded "
    "(numbers, lists, dicts); others as text.\n\nFunctions:\n"
)
_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "array": "list",
          "object": "dict", "null": "None"}


def python_name(name: str) -> str:
    """The Python function a tool is called by (its name, made an identifier)."""
    ident = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    if not ident or ident[0].isdigit() or keyword.iskeyword(ident):
        ident = f"tool_{ident}"
    return ident


def signature(tool: Tool) -> str:
    """`def name(a: str, b: int = 3) -> Any:` and its docstring, from the tool's JSON schema."""
    props: dict[str, Any] = tool.parameters.get("properties") or {}
    required = set(tool.parameters.get("required") or ())
    params = []
    for name, schema in sorted(props.items(), key=lambda kv: kv[0] not in required):  # required first
        kind = schema.get("type") if isinstance(schema, dict) else None
        hint = " | ".join(_TYPES.get(k, "Any") for k in kind) if isinstance(kind, list) else _TYPES.get(kind, "Any")
        text = f"{name}: {hint}" if name.isidentifier() and not keyword.iskeyword(name) else f"**{{'{name}': {hint}}}"
        if name not in required:
            default = schema.get("default") if isinstance(schema, dict) else None
            text += f" = {default!r}"
        params.append(text)
    doc = (tool.description or "").strip().replace('"""', "'''")
    lines = [f"def {python_name(tool.name)}({', '.join(params)}) -> Any:"]
    if doc:
        lines.append('    """' + doc.replace("\n", "\n    ") + '"""')
    return "\n".join(lines)


def python_tool(tools: ToolSet) -> Tool:
    """The one tool code mode offers, its description listing `tools` as Python functions."""
    listing = "\n\n".join(signature(t) for t in tools)
    specs = [{"name": python_name(t.name), "params": _param_order(t), "doc": t.description or ""} for t in tools]
    by_python = {python_name(t.name): t.name for t in tools}

    async def python(code: str, ctx: ToolContext) -> ToolResult:
        from ..sandbox.stateful import kernel_for
        from ..tools.builtin.shell import sandbox_of, to_result

        run = ctx.state.get("shou.run")
        calls = CodeCalls(run, by_python) if run is not None else None
        kernel = kernel_for(sandbox_of(ctx), ctx.resource_key, ctx.workspace)
        try:
            result = to_result(await kernel.execute(code, tools=specs, on_call=calls))
        finally:  # a cell that failed after an untrusted call still left the content in the interpreter
            if calls is not None and calls.untrusted:
                kernel.taint()
        # Outside content must not lose its marking on the way through, in this cell or any later one
        # (it may sit in a variable): the executor wraps it in the untrusted delimiters.
        return replace(result, untrusted=True) if kernel.tainted else result

    return Tool(CODE_TOOL, INTRO + listing, {
        "type": "object", "properties": {"code": {"type": "string", "description": "The Python code to run."}},
        "required": ["code"], "additionalProperties": False}, python, timeout=BACKSTOP, context_param="ctx")


def _param_order(tool: Tool) -> list[str]:
    props = tool.parameters.get("properties") or {}
    required = set(tool.parameters.get("required") or ())
    return [n for n in sorted(props, key=lambda n: n not in required)]


class CodeCalls:
    """Runs the tool calls one piece of code makes, as calls of a sub-run of `run` (shou.agent.subrun)."""

    def __init__(self, run: Run, by_python: dict[str, str]) -> None:
        from .loop import Run as RunClass
        from .subrun import SubSession, derived

        agent = derived(run.agent, code_mode=False)  # its tools: what code calls
        self.by_python = by_python
        self.finished: dict[str, ToolCallFinished] = {}
        self.untrusted = False
        me = run.run_id

        def forward(event: Event) -> None:
            if isinstance(event, ToolCallFinished):
                self.finished[event.call_id] = event
            run.emit(event if event.parent else replace(event, parent=me))

        self.run = RunClass(agent, "tool calls of a python action", SubSession(run.session), forward,
                            run_id=run.sub_id(), budgets=run.accounts.budgets)
        self.run.step = run.step

    async def __call__(self, request: Any) -> dict[str, Any]:
        if not isinstance(request, dict):  # the code wrote on the pipe itself: answer, do not break
            return {"error": "a tool call must name the tool and give its arguments"}
        name = self.by_python.get(str(request.get("name")), "")
        arguments = request.get("arguments")
        if not name or not isinstance(arguments, dict):
            return {"error": f"no tool is called {request.get('name')!r}"}
        call = ToolCall(f"code_{secrets.token_hex(6)}", name, json.dumps(arguments))
        waiting = await self.run.call_tools([call])
        done = self.finished.get(call.id)
        if done is None:
            return {"error": waiting or f"{name} was not run"}
        tool = self.run.agent.tools.get(name)
        # Whatever the call's executor marked (an untrusted tool, a spill of one read back, a result its tool
        # flagged) is outside content in the interpreter now.
        self.untrusted = self.untrusted or bool(tool is not None and tool.untrusted_output) or \
            reads_untrusted_spill(name, arguments) or done.content.lstrip().startswith(UNTRUSTED_OPEN)
        if done.is_error:
            return {"error": done.content}
        structured = (done.details or {}).get("structured")
        return {"value": structured if structured is not None else _decoded(done.content)}


def _decoded(text: str) -> Any:
    """A result as Python: JSON when it is JSON (`"42"` is 42), the text otherwise."""
    stripped = text.strip()
    if stripped[:1] in ('{', '[', '"', '-') or stripped[:1].isdigit() or stripped in ("true", "false", "null"):
        try:
            return json.loads(stripped)
        except ValueError:
            pass
    return text
