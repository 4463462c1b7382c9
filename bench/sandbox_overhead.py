"""How much the bubblewrap sandbox adds to starting a trivial program.

Runs `/usr/bin/python3 -c pass` and `/usr/bin/true` N times each, as a plain subprocess and through
`BubblewrapSandbox.run`, interleaved so machine noise hits both alike, and prints the medians as a
Markdown table row. Goal: at most 30 ms added for python3.

    python bench/sandbox_overhead.py [N]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time

from shou.sandbox.base import Limits
from shou.sandbox.bubblewrap import BubblewrapSandbox


async def main(n: int) -> None:
    ok, why = BubblewrapSandbox.available()
    if not ok:
        sys.exit(f"bubblewrap does not work here: {why}")
    with tempfile.TemporaryDirectory() as ws:
        sb = BubblewrapSandbox(ws, Limits(timeout=30))
        await sb.run(["true"])  # warm up: ACL grant, page cache
        rows = []
        for argv in (["/usr/bin/python3", "-c", "pass"], ["/usr/bin/true"]):
            plain, boxed = [], []
            for _ in range(n):
                t0 = time.perf_counter()
                subprocess.run(argv, check=True, cwd=ws)
                plain.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                r = await sb.run(argv)
                boxed.append(time.perf_counter() - t0)
                assert r.ok, r.for_model()
            p, b = statistics.median(plain) * 1000, statistics.median(boxed) * 1000
            rows.append((" ".join(argv), p, b))
    load = os.getloadavg()
    print(f"N={n} per case; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"cgroup {'on' if sb.use_cgroup else 'off'}\n")
    print("| command | plain subprocess (ms, median) | bubblewrap sandbox (ms, median) | added (ms) | ratio |")
    print("|---|---|---|---|---|")
    for cmd, p, b in rows:
        print(f"| `{cmd}` | {p:.1f} | {b:.1f} | {b - p:.1f} | {b / p:.2f}x |")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50))
