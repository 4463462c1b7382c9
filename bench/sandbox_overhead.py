"""How much each sandbox adds to starting a trivial program.

Runs `/usr/bin/python3 -c pass` and `/usr/bin/true` N times each, as a plain subprocess, through
`BubblewrapSandbox.run` and, with `--docker`, through `DockerSandbox.run` (a fresh container per call, the
image `.ci/docker-image` builds), interleaved so machine noise hits all alike, and prints the medians as a
Markdown table. Goal: at most 30 ms added for python3 by bubblewrap.

    python bench/sandbox_overhead.py [N] [--docker [IMAGE]]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from shou.sandbox.base import Limits
from shou.sandbox.bubblewrap import BubblewrapSandbox


async def main(n: int, docker_image: str | None) -> None:
    ok, why = BubblewrapSandbox.available()
    if not ok:
        sys.exit(f"bubblewrap does not work here: {why}")
    with tempfile.TemporaryDirectory() as ws:
        boxes: dict[str, Any] = {"bubblewrap": BubblewrapSandbox(ws, Limits(timeout=30))}
        if docker_image:
            from shou.sandbox.docker import DEFAULT_IMAGES, DockerSandbox

            ok, why = DockerSandbox.available()
            if not ok:
                sys.exit(f"no Docker engine: {why}")
            boxes["docker"] = DockerSandbox(ws, Limits(timeout=60), images=dict.fromkeys(DEFAULT_IMAGES, docker_image))
        for sb in boxes.values():
            await sb.run(["true"])  # warm up: page cache, the image's layers
        rows = []
        for argv in (["/usr/bin/python3", "-c", "pass"], ["/usr/bin/true"]):
            times: dict[str, list[float]] = {"plain": [], **{name: [] for name in boxes}}
            for _ in range(n):
                t0 = time.perf_counter()
                subprocess.run(argv, check=True, cwd=ws)
                times["plain"].append(time.perf_counter() - t0)
                for name, sb in boxes.items():
                    t0 = time.perf_counter()
                    r = await sb.run(argv)
                    times[name].append(time.perf_counter() - t0)
                    assert r.ok, r.for_model()
            rows.append((" ".join(argv), {k: statistics.median(v) * 1000 for k, v in times.items()}))
    load = os.getloadavg()
    cgroup = boxes["bubblewrap"].use_cgroup
    print(f"N={n} per case; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"cgroup {'on' if cgroup else 'off'}\n")
    names = list(boxes)
    print("| command | plain subprocess (ms) | " + " | ".join(f"{n} (ms) | {n} added (ms)" for n in names) + " |")
    print("|---|---|" + "---|---|" * len(names))
    for cmd, med in rows:
        cells = " | ".join(f"{med[n]:.1f} | {med[n] - med['plain']:.1f}" for n in names)
        print(f"| `{cmd}` | {med['plain']:.1f} | {cells} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("n", nargs="?", type=int, default=50)
    ap.add_argument("--docker", nargs="?", const="shou-sandbox:local", default=None, metavar="IMAGE")
    args = ap.parse_args()
    asyncio.run(main(args.n, args.docker))
