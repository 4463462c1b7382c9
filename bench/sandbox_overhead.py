"""How much each sandbox adds to starting a trivial program.

Runs `/usr/bin/python3 -c pass` and `/usr/bin/true` N times each, as a plain subprocess, through
`BubblewrapSandbox.run` (warm: a resident executor in one long-lived sandbox; and a sandbox per call,
`warm=False`) and, with `--docker`, through `DockerSandbox.run` (warm: a resident executor in one
long-lived container; and a container per call), in the image `.ci/docker-image` builds, interleaved so
machine noise hits all alike, and prints the medians as a Markdown table. Goals (issue 35): at most 5 ms
added by warm bubblewrap, 20 ms by warm Docker.

    python bench/sandbox_overhead.py [N] [--docker [IMAGE]] [--warm-only]
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


async def main(n: int, docker_image: str | None, warm_only: bool) -> None:
    ok, why = BubblewrapSandbox.available()
    if not ok:
        sys.exit(f"bubblewrap does not work here: {why}")
    with tempfile.TemporaryDirectory() as ws:
        boxes: dict[str, Any] = {"bubblewrap warm": BubblewrapSandbox(ws, Limits(timeout=30))}
        if not warm_only:
            boxes["bubblewrap per call"] = BubblewrapSandbox(ws, Limits(timeout=30), warm=False)
        if docker_image:
            from shou.sandbox.docker import DEFAULT_IMAGES, DockerSandbox

            ok, why = DockerSandbox.available()
            if not ok:
                sys.exit(f"no Docker engine: {why}")
            images = dict.fromkeys(DEFAULT_IMAGES, docker_image)
            boxes["docker warm"] = DockerSandbox(ws, Limits(timeout=60), images=images)
            if not warm_only:
                boxes["docker per call"] = DockerSandbox(ws, Limits(timeout=60), images=images, warm=False)
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
        for sb in boxes.values():
            sb.close()
    load = os.getloadavg()
    cgroup = boxes["bubblewrap warm"].use_cgroup
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
    ap.add_argument("--warm-only", action="store_true", help="leave out the per-call sandboxes")
    args = ap.parse_args()
    asyncio.run(main(args.n, args.docker, args.warm_only))
