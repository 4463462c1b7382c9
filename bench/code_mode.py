"""Code as action against ReAct on a task that needs 10 tool calls: model calls and prompt tokens of each.

The task: start from 1 and apply ten steps (add 3, multiply by 2, ... alternating), each one a tool call
whose input is the last one's output. As ReAct the scripted model makes one call per turn (11 requests, the
history growing each time); in code mode it writes one `python` action that calls the tools in a loop, then
answers (2 requests). Both run against the scripted model over loopback HTTP with the same tools, in the
sandbox the settings choose. The prompt tokens are what each request carried: shou's own count of the
request (ModelRequest.tokens) and what the scripted server counted (its usage).

    python bench/code_mode.py
"""

from __future__ import annotations

import asyncio
import tempfile

from shou import Agent, OpenAICompatible, tool
from shou.events import ModelRequest, ModelResponse, RunFinished
from shou.models.scripted import ScriptedServer

STEPS = [("add", 3), ("multiply", 2)] * 5


@tool
def add(a: int, b: int) -> int:
    """Add two integers and return the sum."""
    return a + b


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers and return the product."""
    return a * b


def expected() -> int:
    value = 1
    for op, n in STEPS:
        value = value + n if op == "add" else value * n
    return value


def react_script() -> list[dict]:
    turns, value = [], 1
    for op, n in STEPS:
        turns.append({"tool_calls": [{"name": op, "arguments": {"a": value, "b": n}}]})
        value = value + n if op == "add" else value * n
    return [*turns, {"text": f"The result is {value}."}]


def code_script() -> list[dict]:
    code = ("value = 1\nfor op, n in " + repr(STEPS) + ":\n"
            "    value = add(a=value, b=n) if op == 'add' else multiply(a=value, b=n)\nvalue")
    return [{"tool_calls": [{"name": "python", "arguments": {"code": code}}]}, {"text": f"The result is {expected()}."}]


async def measure(code_mode: bool) -> dict:
    with ScriptedServer(code_script() if code_mode else react_script()) as srv:
        model = OpenAICompatible("scripted", base_url=srv.base_url, api_key="k", stream=False)
        agent = Agent(model, [add, multiply], workspace=tempfile.mkdtemp(), code_mode=code_mode, max_steps=20)
        events = [e async for e in agent.stream("Start from 1 and apply the ten steps.")]
        await model.aclose()
    done = events[-1]
    assert isinstance(done, RunFinished) and done.status == "completed" and str(expected()) in done.answer
    requests = [e for e in events if isinstance(e, ModelRequest) and not e.parent]
    tool_calls = sum(1 for e in events if e.type == "tool_call_finished" and e.call_id and "code_" not in e.call_id)
    inner = sum(1 for e in events if e.type == "tool_call_finished" and e.parent)
    return {"model calls": len(requests), "prompt tokens (shou)": sum(r.tokens for r in requests),
            "prompt tokens (server)": sum(e.usage.input_tokens for e in events if isinstance(e, ModelResponse)),
            "tool calls": tool_calls + inner}


async def main() -> None:
    react, code = await measure(False), await measure(True)
    print(f"| {'':24} | ReAct | code mode | code / ReAct |")
    print("|---|---:|---:|---:|")
    for key in react:
        ratio = code[key] / react[key] if react[key] else float("nan")
        print(f"| {key:24} | {react[key]} | {code[key]} | {ratio:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
