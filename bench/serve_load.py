"""Load on `shou serve`: N concurrent runs through the API, across two replicas sharing one PostgreSQL database.

    python bench/serve_load.py [--runs 200] [--replicas 2] [--max-concurrent 64] [--rate PER_SECOND]

Starts Debian's PostgreSQL in a temp dir (as the tests do), the scripted model over loopback HTTP, and the
replicas as `shou serve` processes. Each run is asked for on one replica and streamed from the next one (so
half the streams cross replicas), with a tool call then an answer. Reports failures, lost or repeated events
(each run's stream against its stored events, re-read afterwards), time from the POST to the first event
(p50/p95) and runs finished per second. Results go in bench/README.md by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.postgres import start_postgres  # noqa: E402
from tests.fixtures.serving import start_serve  # noqa: E402

from shou.models.scripted import ScriptedServer  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"
WARMUP = 3  # runs per replica before measuring


def turns(runs: int) -> list[dict]:
    # Whatever order the runs take turns in, each ends at its first text: tool call, text, tool call, text...
    out: list[dict] = []
    for i in range(runs):
        out.append({"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} * 2"}}]})
        out.append({"text": f"done {i}"})
    return out


async def one(clients: list[httpx.AsyncClient], i: int, start: float = 0.0) -> dict:
    ask, watch = clients[i % len(clients)], clients[(i + 1) % len(clients)]
    await asyncio.sleep(start)
    t0 = time.perf_counter()
    r = await ask.post("/v1/runs", json={"task": f"double {i}"})
    r.raise_for_status()
    posted = time.perf_counter() - t0
    run_id = r.json()["run_id"]
    first = None
    ids: list[int] = []
    status = ""
    async with watch.stream("GET", f"/v1/runs/{run_id}/events") as resp:
        event, data, eid = "", "", None
        async for line in resp.aiter_lines():
            if line.startswith("id: "):
                eid = int(line[4:])
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
            elif not line and data:
                if first is None:
                    first = time.perf_counter() - t0
                if eid is not None:
                    ids.append(eid)
                if event == "run_finished":
                    status = json.loads(data)["status"]
                    break
                event, data, eid = "", "", None
    end = time.perf_counter() - t0
    return {"run_id": run_id, "posted": posted, "first": first, "end": end, "ids": ids, "status": status}


async def stored_ids(client: httpx.AsyncClient, run_id: str) -> list[int]:
    body = (await client.get(f"/v1/runs/{run_id}/events")).text
    return [int(line[4:]) for line in body.splitlines() if line.startswith("id: ")]


async def load(urls: list[str], runs: int, rate: float | None) -> dict:
    limits = httpx.Limits(max_connections=2 * runs, max_keepalive_connections=2 * runs)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    clients = [httpx.AsyncClient(base_url=u, headers=headers, timeout=300, limits=limits) for u in urls]
    try:
        # Warm-up, not measured: each replica's first runs load the tokenizer and build its tool specs.
        await asyncio.gather(*(one([c, c], i) for c in clients for i in range(WARMUP)))
        t0 = time.perf_counter()
        results = await asyncio.gather(*(one(clients, i, i / rate if rate else 0.0) for i in range(runs)),
                                       return_exceptions=True)
        wall = time.perf_counter() - t0
        ok = [r for r in results if isinstance(r, dict)]
        errors = [repr(r) for r in results if not isinstance(r, dict)]
        lost = repeated = 0
        for r in ok:
            stored = await stored_ids(clients[0], r["run_id"])
            lost += len(set(stored) - set(r["ids"]))
            repeated += len(r["ids"]) - len(set(r["ids"]))
        firsts = sorted(r["first"] for r in ok if r["first"] is not None)
        posts = sorted(r["posted"] for r in ok)
        return {
            "runs": runs, "completed": sum(r["status"] == "completed" for r in ok),
            "failed": runs - sum(r["status"] == "completed" for r in ok), "errors": errors[:3],
            "lost_events": lost, "repeated_events": repeated,
            "first_event_p50_ms": round(1000 * statistics.median(firsts), 1) if firsts else None,
            "first_event_p95_ms": round(1000 * firsts[int(0.95 * (len(firsts) - 1))], 1) if firsts else None,
            "post_p50_ms": round(1000 * statistics.median(posts), 1) if posts else None,
            "run_p50_ms": round(1000 * statistics.median(r["end"] for r in ok), 1) if ok else None,
            "wall_s": round(wall, 2), "runs_per_s": round(runs / wall, 1),
        }
    finally:
        for c in clients:
            await c.aclose()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--max-concurrent", type=int, default=64)
    ap.add_argument("--rate", type=float, default=None,
                    help="start runs at this many per second (default: all at once)")
    args = ap.parse_args()
    pg = start_postgres()
    model = ScriptedServer(turns(args.runs + WARMUP * args.replicas)).start()
    home = Path(tempfile.mkdtemp(prefix="shou-load-"))
    (home / "ws").mkdir()
    (home / "tokens").write_text(f"{TOKEN} bench\n")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("SHOU_")}
    env.update({"HOME": str(home), "SHOU_CONFIG_DIR": str(home / "config"), "SHOU_BASE_URL": model.base_url,
                "SHOU_MODEL": "scripted-bench", "SHOU_API_KEY": "x", "PYTHONPATH": str(ROOT / "src")})
    url = pg.database("load")
    servers = []
    try:
        for i in range(args.replicas):
            servers.append(start_serve(home / "ws", env, "--store", url, "--tokens", str(home / "tokens"),
                                       "--max-runs-per-user", str(10 * args.runs), "--max-concurrent",
                                       str(args.max_concurrent), "--replica", f"r{i}"))
        result = asyncio.run(load([s.url for s in servers], args.runs, args.rate))
        result["replicas"], result["rate"] = args.replicas, args.rate
        print(json.dumps(result, indent=2))
    finally:
        for s in servers:
            s.stop()
            problems = [line for line in s.log().splitlines() if "failed" in line or "Error" in line]
            if problems:
                print(f"replica {s.url}:", *problems[:5], sep="\n  ", file=sys.stderr)
        model.close()
        pg.stop()


if __name__ == "__main__":
    main()
