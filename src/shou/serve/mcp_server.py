"""`shou mcp serve`: the agent's tools, and a whole agent, as an MCP server (stdio, or streamable HTTP).

Every tool of the agent is offered with its schema, and every call goes through what a run's calls go
through: the permission policy and approvals (a call that would ask is refused unless the server was
started with `--yes`: nobody can be asked over the protocol), the sandbox, the tool's timeout. One more
tool, `run_agent(task)`, runs a whole shou agent on the task and returns its answer, reporting progress
(each tool call, each step) as MCP progress notifications while it works.
"""

from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server import Server

from ..events import Event, RunFinished, StepFinished, ToolCallFinished, ToolCallStarted
from ..messages import ToolCall
from ..session import Session

if TYPE_CHECKING:
    from ..agent.agent import Agent

RUN_AGENT = "run_agent"
_RUN_AGENT_SCHEMA = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": "What the agent is to do, in full: it sees nothing "
                                                             "else."}},
    "required": ["task"],
    "additionalProperties": False,
}


def make_server(agent: Agent) -> Server[Any]:
    """An MCP server over `agent`."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        tools = [types.Tool(name=t.name, description=t.description, input_schema=t.parameters)
                 for t in agent.tools if t.name != "delegate"]
        tools.append(types.Tool(name=RUN_AGENT, input_schema=_RUN_AGENT_SCHEMA, description=(
            "Run a shou agent (a model with these tools) on a task until it is done, and get its answer. "
            "Progress is reported while it works.")))
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        if params.name == RUN_AGENT:
            return await run_agent(agent, arguments, ctx)
        return await call_one(agent, params.name, arguments)

    return Server("shou", instructions="shou's tools, run under its sandbox and permission policy, and run_agent.",
                  on_list_tools=list_tools, on_call_tool=call_tool)


async def call_one(agent: Agent, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    """One tool call, screened and run as the loop runs them; its result as MCP content."""
    from ..agent.loop import Run

    seen: list[Event] = []
    run = Run(agent, f"MCP call of {name}", Session(None, None), seen.append)
    run.step = 1
    call = ToolCall(f"mcp_{secrets.token_hex(6)}", name, json.dumps(arguments))
    try:
        waiting = await run.call_tools([call])
    finally:
        run.close()
    done = next((e for e in seen if isinstance(e, ToolCallFinished) and e.call_id == call.id), None)
    if done is None:
        return _result(waiting or "Error: the call was not run.", True)
    content: list[Any] = [types.TextContent(type="text", text=done.content)]
    if done.image is not None:
        content.append(types.ImageContent(type="image", data=done.image.data, mime_type=done.image.media_type))
    return types.CallToolResult(content=content, is_error=done.is_error)


async def run_agent(agent: Agent, arguments: dict[str, Any], ctx: Any) -> types.CallToolResult:
    """A whole run of `agent` on the task; each tool call and step is reported as progress."""
    task = arguments.get("task")
    if not isinstance(task, str) or not task.strip():
        return _result("Error: run_agent needs a task: what the agent is to do.", True)
    steps = 0
    async for event in agent.stream(task):
        if event.parent:
            continue
        message = None
        if isinstance(event, ToolCallStarted):
            message = f"→ {event.call.name}({event.call.arguments[:200]})"
        elif isinstance(event, StepFinished):
            steps = event.step
            message = f"step {event.step} done"
        if message is not None:
            await _progress(ctx, steps, message)
        if isinstance(event, RunFinished):
            meta = {"status": event.status, "steps": event.steps, "run_id": event.run_id,
                    "tokens": event.usage.total_tokens, "cost": event.usage.cost}
            if event.status == "completed":
                return types.CallToolResult(content=[types.TextContent(type="text", text=event.answer)],
                                            structured_content=meta)
            return types.CallToolResult(content=[types.TextContent(type="text", text=(
                f"The agent stopped ({event.status}): {event.error or 'no answer'}"))], structured_content=meta,
                is_error=True)
    return _result("Error: the run ended without finishing.", True)


async def _progress(ctx: Any, progress: float, message: str) -> None:
    session = getattr(ctx, "session", None)
    if session is None:
        return
    try:
        await session.report_progress(progress, None, message)
    except Exception:  # a client that went away must not stop the run it asked for
        return


def _result(text: str, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)


async def serve_stdio(agent: Agent) -> None:
    """Serve over this process's stdin and stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    server = make_server(agent)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def serve_http(agent: Agent, port: int, token: str, host: str = "127.0.0.1") -> None:
    """Serve streamable HTTP at `http://HOST:PORT/mcp`. Loopback is shared by every user and program of the
    machine, and these tools act on the workspace: each request must carry `Authorization: Bearer TOKEN`."""
    import hmac

    import uvicorn
    from starlette.responses import PlainTextResponse

    inner = make_server(agent).streamable_http_app(host=host)
    expected = f"Bearer {token}".encode()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                await PlainTextResponse("a bearer token is required (shou mcp serve printed it)", 401)(
                    scope, receive, send)
                return
        await inner(scope, receive, send)

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
