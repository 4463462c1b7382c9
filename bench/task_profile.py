"""N sequential peers tasks (3 turns each) with shou's runner or `floor-aio`, against the peers' mock: the
driver for deterministic counts of issue 35 (bench/README, "Issue 35: toward floor-aio").

    python ../shared/bench/peers/mock_server.py --port 18735 &
    PYTHONPATH=src python bench/task_profile.py --port 18735 --fw shou -n 200 --profile   # cProfile, calls/task
    # PROF_OUT=FILE also keeps the whole profile (pstats) for a breakdown by module
    for n in 20 120; do PYTHONPATH=src valgrind --tool=callgrind --callgrind-out-file=cg.$n.out \\
        "$(python -c 'import sys; print(sys.executable)')" bench/task_profile.py --fw shou -n $n; done
    # instructions per task = (total of cg.120.out - total of cg.20.out) / 100 (start-up cancels out)

Run valgrind on the interpreter itself, not a pyenv shim (a shell script: callgrind would count the shell).
`PEERS` is the harness's folder (default `../shared/bench/peers` next to the repo); it is only read.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path


def main() -> None:
    here = Path(__file__).resolve().parent
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=18735)
    p.add_argument("--fw", choices=("shou", "floor-aio"), default="shou")
    p.add_argument("-n", type=int, default=100, help="measured tasks")
    p.add_argument("--warm", type=int, default=20, help="tasks before the measured ones")
    p.add_argument("--profile", action="store_true", help="cProfile the measured tasks (tottime top 15)")
    a = p.parse_args()
    sys.path.insert(0, os.environ.get("PEERS", str(here.parent.parent / "shared" / "bench" / "peers")))
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench")  # the harness's workers run with one set
    if a.fw == "shou":
        sys.path.insert(0, str(here))
        import shou_runner as runner
    else:
        from runners import floor_aio as runner  # type: ignore[no-redef]
    import runners.common as common

    async def go() -> None:
        fw = runner.FW(f"http://127.0.0.1:{a.port}/v1")

        def prompt(i: int) -> str:
            return common.make_task(f"tp{os.getpid()}-{i}", i)[0]

        for i in range(a.warm):
            await fw.arun(prompt(i))
        prof = None
        if a.profile:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        t0 = time.perf_counter()
        for i in range(a.warm, a.warm + a.n):
            await fw.arun(prompt(i))
        dt = time.perf_counter() - t0
        if prof is not None:
            import pstats

            prof.disable()
            stats = pstats.Stats(prof)
            stats.sort_stats("tottime").print_stats(15)
            if os.environ.get("PROF_OUT"):
                stats.dump_stats(os.environ["PROF_OUT"])
            print(f"Python calls per task: {stats.total_calls / a.n:.0f}")  # type: ignore[attr-defined]
        print(f"{a.fw}: {dt / a.n * 1000:.2f} ms per task (wall clock: noise on a shared machine)", file=sys.stderr)

    asyncio.run(go())


if __name__ == "__main__":
    main()
