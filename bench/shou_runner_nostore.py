"""shou with the session store off, for the comparison row of the peers' harness (see shou_runner.py)."""

from __future__ import annotations

import os

os.environ["SHOU_BENCH_STORE"] = "0"

from shou_runner import FW as _StoreFW

PACKAGES = ["shou"]
HAS_ASYNC = True


class FW(_StoreFW):
    """Same agent, no session store."""

    name = "shou-nostore"
