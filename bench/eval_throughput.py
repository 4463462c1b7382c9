"""Samples per second of `shou eval` on this machine (`-j`) and on a Ray cluster, and the driver's memory.

N scripted cases (the oracle answers each in one turn; an answer check passes it) run through
`shou.eval.evaluate` with models=["oracle"], each mode in a fresh Python process:
- `local`: `run_local`, J samples at once in the driver process;
- `ray`: a Ray cluster of J CPUs on this machine (`ray=local`: `ray.init()` starts it on the loopback
  address, and stops it at the end), each sample a Ray task of one CPU.

Each sample is what a real one is minus the model: a workspace made from its fixture, a session log in its
own SQLite file, a run, a check, a result line fsynced by the driver. Reported per mode: cases/s over the
whole run (a Ray cluster's start included) and from the first result to the last (steady state), the driver
process's peak RSS (`ru_maxrss` of that process alone: Ray's daemons and workers are processes of their
own, and the report written at the end is counted), and its RSS as the results come in.

Ray runs its workers at nice 15 unless told otherwise; the bench runs them at 0 (`RAY_worker_niceness=0`,
unless the environment sets it), as the local mode's driver runs, so that other load on a shared machine
slows both modes alike.

    python bench/eval_throughput.py 10000 -j 2              # both modes
    python bench/eval_throughput.py 2000 -j 2 --modes ray   # one
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def rss_mb() -> float:
    """This process's resident memory now."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def child(n: int, jobs: int, mode: str, folder: Path) -> dict[str, Any]:
    """One mode's run in this process (the bench's parent starts one process per mode)."""
    from shou.eval import Case, Suite, answer_contains
    from shou.eval.driver import evaluate

    suite = Suite("bench", tuple(Case(f"c{i:05d}", f"Say 42 ({i}).", checks=(answer_contains("42"),),
                                      solution=({"text": "42"},)) for i in range(n)))
    seen = {"count": 0, "first": 0.0, "tenth_rss": 0.0, "ninetieth_rss": 0.0}

    def on_result(result: dict[str, Any]) -> None:
        seen["count"] += 1
        if seen["count"] == 1:
            seen["first"] = time.perf_counter()
        if seen["count"] == max(1, n // 10):
            seen["tenth_rss"] = rss_mb()
        if seen["count"] == max(1, n * 9 // 10):
            seen["ninetieth_rss"] = rss_mb()

    start_rss = rss_mb()
    t0 = time.perf_counter()
    report = asyncio.run(evaluate(suite, out=folder, models=["oracle"], jobs=jobs, on_result=on_result,
                                  ray="local" if mode == "ray" else None))
    t1 = time.perf_counter()
    passed = sum(1 for r in report.results if r.get("passed"))
    return {"mode": mode, "cases": n, "jobs": jobs, "passed": passed, "seconds": round(t1 - t0, 1),
            "rate": round(n / (t1 - t0), 1),
            "steady": round((seen["count"] - 1) / (t1 - seen["first"]), 1) if seen["count"] > 1 else 0.0,
            "start_rss_mb": round(start_rss), "tenth_rss_mb": round(seen["tenth_rss"]),
            "ninetieth_rss_mb": round(seen["ninetieth_rss"]), "end_rss_mb": round(rss_mb()),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def run_mode(n: int, jobs: int, mode: str) -> dict[str, Any]:
    """`mode` in a fresh process, its results folder and Ray's files in temp dirs removed afterwards."""
    work = Path(tempfile.mkdtemp(prefix="shb", dir="/tmp"))  # short: a Ray cluster's sockets go under it
    env = {"RAY_worker_niceness": "0", **os.environ, "RAY_TMPDIR": str(work), "RAY_USAGE_STATS_ENABLED": "0",
           # a cluster on this machine alone: Ray keeps to the loopback address
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           # Ray's token authentication with a token of the run's own (else Ray writes one to ~/.ray)
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    try:
        done = subprocess.run([sys.executable, __file__, str(n), "-j", str(jobs), "--child", mode,
                               "--out", str(work / "out")], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{mode} failed:\n{done.stdout}\n{done.stderr}")
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, nargs="?", default=1000, help="cases (default 1000)")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="samples at once / the Ray cluster's CPUs")
    parser.add_argument("--modes", default="local,ray", help="local, ray or both (default)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.n, args.jobs, args.child, Path(args.out))))
        return
    rows = [run_mode(args.n, args.jobs, mode) for mode in args.modes.split(",")]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{args.n} scripted cases, -j {args.jobs}, {os.cpu_count()} cores, load average after: {load}\n")
    print("| mode | passed | wall (s) | cases/s (whole run) | cases/s (first to last result) | driver RSS at start "
          "/ 10% / 90% of the results / after the report (MB) | driver peak RSS (MB) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['passed']}/{r['cases']} | {r['seconds']} | {r['rate']} | {r['steady']} | "
              f"{r['start_rss_mb']} / {r['tenth_rss_mb']} / {r['ninetieth_rss_mb']} / {r['end_rss_mb']} | "
              f"{r['peak_rss_mb']} |")


if __name__ == "__main__":
    main()
