"""shou as it was before issue 30 (commit 50e96f5), for the peers' harness: the `shou-before` row.

    SHOU_BEFORE_SRC=/work/wt/shou-50e96f5/src PEER_BENCH_EXTRA="shou-before=shou_before_runner,shou=shou_runner" ...

`bench/peers_before_after.sh` is the one command that uses it (it makes the checkout of 50e96f5 too). The
harness runs each framework in its own worker process, so this module can put the old `src/` first on
`sys.path` before anything imports shou, while the `shou` row of the same run imports the installed tree.

It runs the old checkout's own `bench/shou_runner.py`, not this tree's: the runner follows shou's API, which
issue 30 changes, and the old API needs the old runner. The two runners were identical at 50e96f5.
"""

from __future__ import annotations

import importlib.util
import os
import sys

BEFORE_COMMIT = "50e96f5"
SRC = os.path.abspath(os.environ.get("SHOU_BEFORE_SRC", f"/work/wt/shou-{BEFORE_COMMIT}/src"))

if "shou" in sys.modules:  # the row would silently measure whichever shou came first
    raise RuntimeError(f"shou was imported before shou_before_runner: {sys.modules['shou'].__file__}")
if not os.path.isfile(os.path.join(SRC, "shou", "__init__.py")):
    raise RuntimeError(f"SHOU_BEFORE_SRC={SRC} is not a shou src/ folder (see bench/peers_before_after.sh)")
sys.path.insert(0, SRC)

_spec = importlib.util.spec_from_file_location(
    "shou_runner_before", os.path.join(os.path.dirname(SRC), "bench", "shou_runner.py")
)
assert _spec is not None and _spec.loader is not None
_runner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_runner)

import shou  # noqa: E402 -- already loaded by the old runner; imported here to check where from

if not os.path.abspath(shou.__file__).startswith(SRC + os.sep):
    raise RuntimeError(f"shou-before imported {shou.__file__}, not the tree under {SRC}")
# fd 1 is the harness's stderr in a worker: this lands in results/logs/worker-shou-before.log
print(f"shou-before: shou from {shou.__file__}", file=sys.stderr, flush=True)

PACKAGES = ["shou"]
HAS_ASYNC = True


class FW(_runner.FW):
    """The old runner's agent, named for its row."""

    name = "shou-before"
