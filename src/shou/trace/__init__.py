"""Traces of runs, rebuilt from the session log: each step's model call and tool calls, compactions, the end.

The event log is the one source of truth: a trace holds what was logged and nothing else, so a run whose
process was killed ends where its log does, with status `unfinished` (it may also still be running). A
model call's request is stored by content hash (`ModelRequest.messages`, see shou.agent.recorder) and read
only when wanted (`resolve()`); retention may have deleted a message since, and logs written before
requests were recorded have no hashes at all (`recorded` is false). Costs are never made up: a call of
unknown price makes every sum it is part of unknown (`cost` None), with the known part kept beside it.

The parts: `records` (what a trace is made of), `builder` (events folded into traces), `read` (from a
store), `as_json` (for `--json` and the server).
"""

from __future__ import annotations

from .as_json import call_json, run_json, usage_json
from .builder import build, compaction_trace
from .read import find_model_call, find_run, logged_rows, recent_outcomes, resolve, traces
from .records import (
    INTERRUPTED,
    UNFINISHED,
    CompactionTrace,
    HandoffTrace,
    ModelCallTrace,
    RunTrace,
    StepTrace,
    ToolCallTrace,
    total,
)

__all__ = ["INTERRUPTED", "UNFINISHED", "CompactionTrace", "HandoffTrace", "ModelCallTrace", "RunTrace", "StepTrace",
           "ToolCallTrace", "build", "call_json", "compaction_trace", "find_model_call", "find_run", "logged_rows",
           "recent_outcomes", "resolve", "run_json", "total", "traces", "usage_json"]
