"""What running sync tools on worker threads costs the peers' 3-turn task (two tool calls): the same task with
the harness's sync `add`/`multiply` and with async tools of the same names, in alternating rounds of one run.
A sync tool runs on a daemon thread so a slow one can time out and be abandoned (tools/threads.py); an async
one runs on the loop. bench/README, "Issue 35, fourth pass".

    python ../shared/bench/peers/mock_server.py --port 18735 &
    PYTHONPATH=src python bench/tool_hop.py --port 18735
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    here = Path(__file__).resolve().parent
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=18735)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("-n", type=int, default=300, help="tasks per round and kind")
    a = p.parse_args()
    sys.path.insert(0, os.environ.get("PEERS", str(here.parent.parent / "shared" / "bench" / "peers")))
    sys.path.insert(0, str(here))
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench")
    import shou_runner as runner
    from runners.common import add, make_task, multiply

    from shou import Agent, tool

    async def add_async(a: int, b: int) -> int:
        """Add two integers and return the sum."""
        return int(add(a, b))

    async def multiply_async(a: int, b: int) -> int:
        """Multiply two integers and return the product."""
        return int(multiply(a, b))

    async def go() -> None:
        fw = runner.FW(f"http://127.0.0.1:{a.port}/v1")
        agents = {"sync tools": fw.agent,
                  "async tools": Agent(fw.model, [tool(add_async, name="add"), tool(multiply_async, name="multiply")],
                                       runner.SYSTEM, workspace=runner._WORKSPACE, store=fw.store)}
        seen: dict[str, list[tuple[float, float]]] = {k: [] for k in agents}
        i = 0
        for _ in range(a.rounds):
            for kind, agent in agents.items():
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(a.n):
                    i += 1
                    result = await agent.arun(make_task(f"hop{i}", i)[0])
                    assert result.status == "completed" and result.steps == 3, result
                seen[kind].append(((time.perf_counter() - t0) / a.n * 1e3, (time.process_time() - c0) / a.n * 1e3))
        for kind, rows in seen.items():
            wall = statistics.median(r[0] for r in rows)
            cpu = statistics.median(r[1] for r in rows)
            print(f"{kind:12s} wall {wall:.3f} ms a task, CPU {cpu:.3f} ms a task (medians of {a.rounds} rounds)")

    asyncio.run(go())


if __name__ == "__main__":
    main()
