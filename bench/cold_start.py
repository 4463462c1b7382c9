"""Cold start: what `import shou`, a one-step run, and 1,000 saved memories cost a fresh `shou` process.

    python bench/cold_start.py            # 1,000 memories, median of 5 runs of each command
    python bench/cold_start.py --memories 5000 --runs 7

In a temporary workspace holding `.shou/memory.db` with N memories (embedded, as `shou memory import`
leaves them), each command runs in a new process, alternating, so that every one pays Python's start, the
imports and, for the last two, the model load and the index build:

- `import shou` (python -c): the library alone;
- `shou --help`: the floor for the command line;
- `shou run --model scripted:FILE TASK` in an empty workspace: a one-step run, nothing to recall;
- `shou memory search QUERY` with the memories: opens the store, embeds the query, searches;
- `shou run --model scripted:FILE TASK` with the memories: recalls memories for the task first.

The time each adds over `shou --help` is the cost of memory on the hot path (the goal: under 1 s).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shou.memory import MemoryStore, NewMemory, memory_status

SHOU = [sys.executable, "-m", "shou"]
PEOPLE = ["Ana", "Ben", "Chen", "Dara", "Eli", "Femi", "Gus", "Hana", "Ivo", "Jade"]
TOPICS = ["prefers dark mode in every editor", "runs the tests with pytest -x before each commit",
          "deploys on Fridays only after the standup", "keeps the API keys in the team's vault",
          "wants answers in French when the question is in French", "moved the staging server to Debian 13",
          "is allergic to peanuts", "reviews pull requests in the morning", "uses uv to manage Python",
          "asked for weekly reports every Monday at 9"]


def memories(n: int) -> list[NewMemory]:
    """N distinct memories of the kind an agent saves."""
    rng = random.Random(1)
    return [NewMemory(f"{rng.choice(PEOPLE)} {rng.choice(TOPICS)} (note {i})", time=1.7e9 + 3600 * i)
            for i in range(n)]


def timed(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                   env={**os.environ, "NO_COLOR": "1"})
    return time.perf_counter() - t0


def main() -> None:
    """Build the workspace, time each command, print a Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memories", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    hybrid, why = memory_status()
    work = Path(tempfile.mkdtemp(prefix="shou-cold-"))
    try:
        t0 = time.perf_counter()
        with MemoryStore.for_workspace(work) as store:
            store.add_many(memories(args.memories))
            stored = store.count()
        build = time.perf_counter() - t0
        script = work / "one-step.json"
        script.write_text(json.dumps({"turns": [{"text": "Dark mode, as noted."}]}))
        empty = work / "empty"
        empty.mkdir()
        task = "Which editor theme does Ana like?"
        commands = {
            "import shou": ([sys.executable, "-c", "import shou"], work),
            "shou --help": ([*SHOU, "--help"], work),
            "shou run (one step, no memories)": ([*SHOU, "run", "--model", f"scripted:{script}", task], empty),
            "shou memory search": ([*SHOU, "memory", "search", "which editor theme does Ana like?"], work),
            "shou run (one step, 1,000 memories)": ([*SHOU, "run", "--model", f"scripted:{script}", task], work),
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for cmd, cwd in commands.values():  # warm the file cache and bytecode once, untimed
            timed(cmd, cwd)
        for _ in range(args.runs):
            for name, (cmd, cwd) in commands.items():
                times[name].append(timed(cmd, cwd))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    floor = statistics.median(times["shou --help"])
    print(f"{stored} memories ({'hybrid' if hybrid else 'BM25 only'}: {why}), stored in {build:.1f} s; "
          f"median of {args.runs}; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}\n")
    print("| command | median (s) | added over `shou --help` (s) |\n|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        added = "" if name in ("shou --help", "import shou") else f"{median - floor:+.2f}"
        print(f"| `{name}` | {median:.2f} | {added} |")


if __name__ == "__main__":
    main()
