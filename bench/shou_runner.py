"""shou's runner for the peers' overhead harness (`../shared/bench/peers/`; not copied here).

    PEER_BENCH_HOME=$HOME/.cache/peer-bench PEER_BENCH_PIP="-e /path/to/shou" \\
    PYTHONPATH=/path/to/shou/bench PEER_BENCH_EXTRA="shou=shou_runner" PEER_BENCH_EXTRA_PACKAGES=shou \\
      /path/to/shared/bench/peers/run_all.sh --frameworks floor,raw,shou,agno,...

As users run it: the session store on (a SQLite file in a temporary folder), the context builder and
guards on. `SHOU_BENCH_STORE=0` turns the store off for the comparison row. Like every peer here, it
does not stream (the harness checks request parameters); `SHOU_BENCH_STREAM=1` turns streaming on.
"""

from __future__ import annotations

import os
import tempfile

from runners.common import API_KEY, MODEL, SYSTEM, add, multiply

from shou import Agent, OpenAICompatible, SQLiteStore, tool

PACKAGES = ["shou"]
HAS_ASYNC = True
STREAM = os.environ.get("SHOU_BENCH_STREAM", "0") == "1"
_WORKSPACE = tempfile.mkdtemp(prefix="shou-bench-")


def _model(base_url: str) -> OpenAICompatible:
    return OpenAICompatible(MODEL, base_url=base_url, api_key=API_KEY, stream=STREAM)


class FW:
    """The harness's interface: `run`, `arun`, `new_agent`, `new_agent_full`."""

    name = "shou"

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.model = _model(base_url)
        self.tools = [tool(add), tool(multiply)]
        store_on = os.environ.get("SHOU_BENCH_STORE", "1") != "0"
        self.store = SQLiteStore(os.path.join(_WORKSPACE, f"shou-{os.getpid()}.db")) if store_on else None
        self.agent = self.new_agent()
        self.sync_agent = Agent(_model(base_url), self.tools, SYSTEM, workspace=_WORKSPACE, store=self.store)

    def run(self, prompt: str) -> str:
        return self.sync_agent.run(prompt).answer

    async def arun(self, prompt: str) -> str:
        return (await self.agent.arun(prompt)).answer

    def new_agent(self) -> Agent:
        return Agent(self.model, self.tools, SYSTEM, workspace=_WORKSPACE, store=self.store)

    def new_agent_full(self) -> Agent:
        return Agent(_model(self.base_url), [tool(add), tool(multiply)], SYSTEM, workspace=_WORKSPACE,
                     store=self.store)
