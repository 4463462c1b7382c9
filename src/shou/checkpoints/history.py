"""What a session's checkpoint journal says: its changes, which are live, and what undoing some would restore.

Pure functions of the journal's records (checkpoints/journal.py describes them), so each is tested on a list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Change", "PathPlan", "Record", "State", "changes", "live_blobs", "pending_scans", "plan", "runs",
           "same_state", "select"]

State = dict[str, Any] | None  # None: no file at the path
Record = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Change:
    """One path changed by one tool call: its state before and (when the call got that far) after."""

    seq: int  # the before record's position in the journal
    run: str
    step: int
    call: str
    tool: str
    path: str
    before: State
    after: State
    after_known: bool  # False: the process died between the two records (the change may or may not be made)
    next: str | None = None  # the hash of the content the tool was about to write, when it said


@dataclass(frozen=True, slots=True)
class PathPlan:
    """What undoing a path means: put back `target` (its state before the first change undone), if it now is
    `expected` (what shou left there last), or `fallback` (the last change never happened: a kill)."""

    path: str
    target: State
    expected: State
    expected_known: bool
    fallback: State
    changes: tuple[Change, ...]
    next: str | None = None  # the last change unfinished: the hash of what it was writing, if known


def changes(records: list[Record]) -> list[Change]:
    """The journal's live changes in order: not in a dropped run, not undone since."""
    dropped = {r.get("run") for r in records if r.get("k") == "dropped"}
    out: list[Change] = []
    index: dict[tuple[str, str, str], int] = {}
    undone: list[tuple[int, str, int]] = []  # (position, run, after_step)
    for seq, r in enumerate(records):
        kind = r.get("k")
        if kind == "before":
            change = Change(seq, str(r.get("run", "")), int(r.get("step", 0)), str(r.get("call", "")),
                            str(r.get("tool", "")), str(r.get("path", "")), r.get("state"), None, False,
                            r.get("next") if isinstance(r.get("next"), str) else None)
            index[(change.run, change.call, change.path)] = len(out)
            out.append(change)
        elif kind == "after":
            i = index.pop((str(r.get("run", "")), str(r.get("call", "")), str(r.get("path", ""))), None)
            if i is not None:
                c = out[i]
                out[i] = Change(c.seq, c.run, c.step, c.call, c.tool, c.path, c.before, r.get("state"), True, c.next)
        elif kind == "undone":
            undone.append((seq, str(r.get("run", "")), int(r.get("after_step", 0))))
    return [c for c in out if c.run not in dropped
            and not any(seq > c.seq and run == c.run and c.step > after for seq, run, after in undone)]


def runs(found: list[Change]) -> list[str]:
    """The runs that made `found`, in the order of their first change."""
    return list(dict.fromkeys(c.run for c in found))


def select(found: list[Change], run: str | None = None, after_step: int = 0) -> tuple[str | None, list[Change]]:
    """The run meant (`run`, which may be a prefix of its id; default the last one with changes) and its
    changes made after step `after_step`. `ValueError` when `run` names no run or more than one."""
    ids = runs(found)
    if run is None:
        chosen = ids[-1] if ids else None
    else:
        matching = [r for r in ids if r == run] or [r for r in ids if r.startswith(run)]
        if len(matching) != 1:
            raise ValueError(f"no run {run!r} with changes to undo" if not matching else
                             f"{run!r} names {len(matching)} runs; give more of the id")
        chosen = matching[0]
    return chosen, [c for c in found if c.run == chosen and c.step > after_step]


def plan(chosen: list[Change]) -> list[PathPlan]:
    """Per path, what undoing `chosen` restores; the most recently first-changed path first (reverse order)."""
    by_path: dict[str, list[Change]] = {}
    for c in chosen:
        by_path.setdefault(c.path, []).append(c)
    plans = [PathPlan(path, cs[0].before, cs[-1].after, cs[-1].after_known, cs[-1].before, tuple(cs), cs[-1].next)
             for path, cs in by_path.items()]
    return plans[::-1]


def same_state(a: State, b: State) -> bool:
    """Whether two states are the same file content and mode (or both no file). A state kept only by size
    (too big to keep) matches one of the same size and mtime."""
    if a is None or b is None:
        return a is None and b is None
    if a.get("sha") and b.get("sha"):
        return bool(a["sha"] == b["sha"] and a.get("mode") == b.get("mode"))
    return bool(a.get("size") == b.get("size") and a.get("mtime") == b.get("mtime") and a.get("mode") == b.get("mode"))


def pending_scans(records: list[Record]) -> list[Record]:
    """The `scan` records of commands whose changes were never recorded (the process died while they ran)."""
    done = {(r.get("run"), r.get("call")) for r in records if r.get("k") == "scanned"}
    return [r for r in records if r.get("k") == "scan" and (r.get("run"), r.get("call")) not in done]


def live_blobs(records: list[Record]) -> set[str]:
    """The blobs the journal's runs that are not dropped still name (undone ones too: `shou diff` shows them)."""
    dropped = {r.get("run") for r in records if r.get("k") == "dropped"}
    needed: set[str] = set()
    for r in records:
        state = r.get("state")
        if r.get("run") not in dropped and isinstance(state, dict) and isinstance(state.get("sha"), str):
            needed.add(state["sha"])
    needed.update(str(r.get("manifest")) for r in pending_scans(records))
    return needed
