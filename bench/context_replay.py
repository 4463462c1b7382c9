"""Prompt tokens of a 50-step task with 5 KB tool outputs: shou's context policy against the full history.

A replayed model calls `fetch_log(n)` for n = 0..49 (each result about 5 KB, a fact planted in step 3),
then answers. The same run is priced two ways from the requests shou actually built: the tokens shou sent
(compaction and budgeting on), and the tokens the full history would have cost at every step.
Compaction requests are answered by a stand-in extractive summariser (it keeps each tool result's first
sentence and the previous summary), since no LLM runs here; the summaries' token cost is counted too.

    python bench/context_replay.py [WINDOW]
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import sys
import tempfile
from collections.abc import AsyncIterator
from typing import Any

from shou import Agent, tool
from shou.context.builder import ContextPolicy
from shou.context.compaction import MARKER
from shou.context.tokens import TokenCounter
from shou.events import Compacted, ModelRequest, RunFinished
from shou.messages import Message, ToolCall
from shou.models.base import Completion
from shou.usage import Usage

STEPS = 50
FACT = "the vault code is 7341"


@tool
def fetch_log(n: int) -> str:
    """Fetch log number n."""
    rng = random.Random(n)
    words = " ".join(f"{rng.choice(['alpha', 'beta', 'gamma', 'delta'])}{rng.randint(0, 99)}" for _ in range(700))
    return (f"Log {n}: {FACT}. " if n == 3 else f"Log {n}: routine entries. ") + words


class Replay:
    """The replayed model: one fetch per step, then the answer; summaries are extractive."""

    name = "replay:gpt-4o-mini"

    def __init__(self, counter: TokenCounter) -> None:
        self.step = 0
        self.counter = counter
        self.summary_tokens = 0

    async def stream(self, messages: list[Message], tools: list[dict[str, Any]], settings: Any = None
                     ) -> AsyncIterator[Completion]:
        if MARKER in messages[0].text:
            body = messages[-1].text
            previous = body.split("Conversation:\n", 1)[0]
            kept = re.findall(r"tool fetch_log result: (Log \d+: [^.]*\.)", body)
            text = (previous.replace("Previous summary:\n", "").strip() + "\n" + "\n".join(kept)).strip()
            self.summary_tokens += self.counter.messages(messages)
            yield Completion(Message.assistant(text), Usage(self.counter.messages(messages), 50, 1), "stop")
            return
        n = self.step
        self.step += 1
        if n < STEPS:
            call = ToolCall(f"call_{n}", "fetch_log", json.dumps({"n": n}))
            yield Completion(Message.assistant(None, [call]), Usage(), "tool_calls")
        else:
            answer = "The vault code is 7341." if "7341" in " ".join(m.text for m in messages) else "I don't know."
            yield Completion(Message.assistant(answer), Usage(), "stop")

    async def aclose(self) -> None:
        pass


async def main(window: int) -> None:
    counter = TokenCounter("gpt-4o-mini")
    model = Replay(counter)
    with tempfile.TemporaryDirectory() as ws:
        agent = Agent(model, [fetch_log], max_steps=STEPS + 5, workspace=ws,
                      context=ContextPolicy(window=window, reserve_output=1000))
        sent, compactions, answer = [], 0, ""
        full_history: list[int] = []
        async for event in agent.stream("Read logs 0 to 49 one by one, then tell me the vault code."):
            if isinstance(event, ModelRequest):
                sent.append(event.tokens)
            elif isinstance(event, Compacted):
                compactions += 1
            elif isinstance(event, RunFinished):
                answer = event.answer
        # The full-history price of the same steps: the system prompt, every message so far, the tools.
        session_msgs: list[Message] = []
        system = Message.system(agent.instructions)
        tool_tokens = counter.text(json.dumps([fetch_log.spec()]))
        session_msgs.append(Message.user("Read logs 0 to 49 one by one, then tell me the vault code."))
        for n in range(STEPS + 1):
            full_history.append(counter.messages([system, *session_msgs]) + tool_tokens)
            if n < STEPS:
                call = ToolCall(f"call_{n}", "fetch_log", json.dumps({"n": n}))
                result = Message.tool(call.id, "fetch_log", fetch_log.handler(n))
                session_msgs += [Message.assistant(None, [call]), result]
    shou_total = sum(sent) + model.summary_tokens
    full_total = sum(full_history)
    load = os.getloadavg()
    print(f"window {window} tokens; {STEPS} steps of ~5 KB results; {compactions} compactions; "
          f"load average {load[0]:.2f}\n")
    print("| policy | prompt tokens, all steps | largest request | ratio to full history |")
    print("|---|---|---|---|")
    print(f"| full history every step | {full_total:,} | {max(full_history):,} | 1.00 |")
    print(f"| shou (budget + compaction; summaries included) | {shou_total:,} | {max(sent):,} | "
          f"{shou_total / full_total:.2f} |")
    print(f"\nfact planted at step 3 answered at step {STEPS + 1}: {'yes' if '7341' in answer else 'NO'} ({answer!r})")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 12_000))
