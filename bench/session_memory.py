"""Memory a parked session holds (issue 35's "≤ 24 KiB per in-flight session"), by tracemalloc.

Mirrors the peers' harness `worker.py --idle`: N `arun` tasks on one agent of shou's runner (store on),
every one parked at the mock waiting for its first completion (the `hold` tag), then the tracemalloc
difference against a snapshot taken before they started, divided by N, with the top holders.

    python ../shared/bench/peers/mock_server.py --port 18799 &
    PEERS=../shared/bench/peers PYTHONPATH=src python bench/session_memory.py --port 18799 -n 50 --top 25
    PYTHONPATH=src python bench/session_memory.py --fw floor-aio      # the harness's floor, for comparison

`--group lineno` groups by the allocating line, `traceback` (default) by the whole stack (`--frames`
deep, the first frame inside shou shown). The harness's own number is RSS (`worker.py --idle`), which
also sees C allocations (SQLite, OpenSSL, the interpreter's arenas); this one says which Python line
holds what. `PEERS` is the harness's folder (default `../shared/bench/peers` next to the repo); only read.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import time
import tracemalloc
import urllib.request
from pathlib import Path
from typing import Any


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def _where(stat: tracemalloc.StatisticDiff, group: str) -> str:
    """The frame worth reading: the innermost one inside shou, else the innermost one."""
    frames = list(stat.traceback)[::-1]  # tracemalloc lists the oldest frame first
    if group == "traceback":
        for f in frames:
            if "/shou/" in f.filename:
                inner = frames[0]
                here = f"{f.filename.split('/shou/', 1)[1]}:{f.lineno}"
                if inner is not f:
                    here += f" <- {Path(inner.filename).name}:{inner.lineno}"
                return here
    f = frames[0]
    return f"{f.filename.split('/shou/', 1)[-1]}:{f.lineno}"


async def _park(fw: Any, make_task: Any, root: str, n: int, tag: str) -> tuple[list[asyncio.Task[Any]], int]:
    prefix = f"{tag}."
    tasks = [asyncio.ensure_future(fw.arun(make_task(f"{prefix}{i}", i, 0, True)[0])) for i in range(n)]
    loop = asyncio.get_running_loop()
    t0 = time.perf_counter()
    held = 0
    while time.perf_counter() - t0 < 120:
        await asyncio.sleep(0.05)
        held = (await loop.run_in_executor(None, _get, f"{root}/_held?prefix={prefix}"))["held"]
        if held >= n:
            break
    return tasks, held


def main() -> None:
    here = Path(__file__).resolve().parent
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=18799)
    p.add_argument("--fw", choices=("shou", "floor-aio"), default="shou")
    p.add_argument("-n", type=int, default=50, help="parked sessions")
    p.add_argument("--top", type=int, default=25, help="holders listed")
    p.add_argument("--group", choices=("traceback", "lineno"), default="traceback")
    p.add_argument("--frames", type=int, default=12, help="tracemalloc frames kept per allocation")
    p.add_argument("--files", action="store_true", help="also sum the holders by file")
    a = p.parse_args()
    sys.path.insert(0, os.environ.get("PEERS", str(here.parent.parent / "shared" / "bench" / "peers")))
    sys.path.insert(0, str(here))
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench")
    if a.fw == "shou":
        import shou_runner as runner
    else:
        from runners import floor_aio as runner  # type: ignore[no-redef]
    from runners.common import make_task

    root = f"http://127.0.0.1:{a.port}"

    async def go() -> None:
        fw = runner.FW(f"{root}/v1")
        for i in range(5):  # warm: connections, caches, lazy imports, the store's first writes
            await fw.arun(make_task(f"smwarm{os.getpid()}-{i}", i)[0])
        warm = await asyncio.gather(*(fw.arun(make_task(f"smwarm{os.getpid()}-c{i}", i)[0]) for i in range(5)))
        assert all("ANSWER" in w for w in warm), warm
        _get(f"{root}/_held?prefix=none")  # what the first poll imports (idna) is not a session's
        gc.collect()
        tracemalloc.start(a.frames)
        gc.collect()
        before = tracemalloc.take_snapshot()
        size0 = tracemalloc.get_traced_memory()[0]
        tag = f"sm{os.getpid()}"
        tasks, held = await _park(fw, make_task, root, a.n, tag)
        gc.collect()
        after = tracemalloc.take_snapshot()
        size1 = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        filt = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib*")]
        diff = after.filter_traces(filt).compare_to(before.filter_traces(filt), a.group)
        total = sum(s.size_diff for s in diff)
        rows: dict[str, list[int]] = {}  # tracebacks that meet at one line of shou are one holder
        for s in diff:
            row = rows.setdefault(_where(s, a.group), [0, 0])
            row[0] += s.size_diff
            row[1] += s.count_diff
        print(f"parked {held}/{a.n}; traced {(size1 - size0) / a.n / 1024:.1f} KiB per session "
              f"(snapshot difference {total / a.n / 1024:.1f} KiB)")
        print(f"{'B/session':>10} {'blocks/s':>9}  where")
        for where, (size, count) in sorted(rows.items(), key=lambda kv: -kv[1][0])[: a.top]:
            print(f"{size / a.n:10.0f} {count / a.n:9.1f}  {where}")
        if a.files:
            files: dict[str, int] = {}
            for where, (size, _) in rows.items():
                name = where.split(" <- ")[0].rsplit(":", 1)[0]
                files[name] = files.get(name, 0) + size
            print(f"{'B/session':>10}  file")
            for name, size in sorted(files.items(), key=lambda kv: -kv[1])[: a.top]:
                print(f"{size / a.n:10.0f}  {name}")
        await asyncio.get_running_loop().run_in_executor(None, _get, f"{root}/_release?prefix={tag}.&per_s=1000")
        answers = await asyncio.gather(*tasks)
        bad = [x for x in answers if "ANSWER" not in x]
        print(f"released: {len(answers) - len(bad)}/{len(answers)} answered", file=sys.stderr)

    asyncio.run(go())


if __name__ == "__main__":
    main()
