"""A results folder: `run.json` (what was asked for), `results.jsonl` (one line per finished sample) and
`work/` (each sample's workspace: its fixture and the files it wrote, its session log in `.shou/`).

A line is written once its sample is finished and checked, then flushed and fsynced before the next one, so
a result that was reported is on disk. A process killed mid-line leaves a torn last line: it is cut off when
the folder is opened again (that sample is resumed from its session log, not lost), and everything before it
is kept as it was. A sample has at most one line: a second result for it is dropped, so nothing is counted
twice. `run.json` holds what makes the run itself (the suite's cases, models, epochs): the same command again
continues the folder, a different one is refused rather than mixed in.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..jsonfile import load_json

__all__ = ["ResultsLog", "open_run_folder", "read_results"]

RESULTS = "results.jsonl"
MANIFEST = "run.json"


class ResultsLog:
    """`results.jsonl` of a results folder, appended to one whole line at a time."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / RESULTS
        self._lock = threading.Lock()
        # sample -> what it cost: all a run needs of the lines it has (keys to skip, spend to count); the lines
        # themselves stay on disk, so the driver's memory is flat however many samples finish
        self.done: dict[str, float | None] = {}
        self._cut_torn_tail()
        for result in read_results(folder):
            self.done.setdefault(result["sample"], result.get("cost"))
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open while the run lasts

    def _cut_torn_tail(self) -> None:
        """Cut a last line a killed process left half-written (everything before it is kept as it was)."""
        try:
            with open(self.path, "rb+") as f:
                data = f.read()
                if data and not data.endswith(b"\n"):
                    f.truncate(data.rfind(b"\n") + 1)
        except FileNotFoundError:
            pass

    def add(self, result: Mapping[str, Any]) -> bool:
        """Write `result` durably, unless its sample has a line already; whether it was written."""
        line = json.dumps(result, ensure_ascii=False, default=str) + "\n"
        with self._lock:
            if result["sample"] in self.done:
                return False
            self._file.write(line)
            self._file.flush()
            os.fsync(self._file.fileno())
            self.done[result["sample"]] = result.get("cost")
            return True

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._file.close()


def read_results(folder: Path) -> Iterator[dict[str, Any]]:
    """The whole result lines of a results folder (a torn last line is skipped). A whole line that is not a
    result as shou writes them (not JSON, a field of another type) is a `UserError` naming the file and line:
    the folder was edited by hand, and a guess at what it meant would count, rerun or show the wrong thing."""
    path = folder / RESULTS
    try:
        f = open(path, "rb")  # noqa: SIM115 - bytes: a line that is not UTF-8 is named, not a traceback
    except FileNotFoundError:
        return
    with f:
        for number, raw in enumerate(f, 1):
            if not raw.endswith(b"\n"):
                break
            if not raw.strip():
                continue
            where = f"{path}:{number}"
            try:
                result = load_json(raw.decode("utf-8"))
            except ValueError as e:  # UnicodeDecodeError too
                raise UserError(f"{where}: not a result line ({e}); move it aside or give another --out") from None
            problem = result_problem(result)
            if problem:
                raise UserError(f"{where}: not a result line as shou writes them: {problem}; fix or move it aside, "
                                "or give another --out")
            yield result


def _number(value: Any, *, low: float | None = 0, whole: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, int if whole else int | float):
        return False
    return math.isfinite(value) and (low is None or value >= low)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _relative(value: Any) -> bool:
    """A path inside the results folder: a line's workspace is where its session logs are read from."""
    return isinstance(value, str) and bool(value) and not Path(value).is_absolute() and ".." not in Path(value).parts


# field -> (what it must be, the test): each field a sample's line holds (see sample._result), as its readers
# use it (the driver sorts by case, model and epoch; the report adds costs, tokens and latencies; the page
# prints texts and reads session logs under the workspace)
_FIELDS: dict[str, tuple[str, Any]] = {
    "sample": ("a string", lambda v: isinstance(v, str) and bool(v)),
    "case": ("a string", lambda v: isinstance(v, str)),
    "model": ("a string", lambda v: isinstance(v, str)),
    "outcome": ('"pass", "fail" or "error"', lambda v: v in ("pass", "fail", "error")),
    "epoch": ("a whole number, at least 1", lambda v: _number(v, low=1, whole=True)),
    "passed": ("true or false", lambda v: isinstance(v, bool)),
    "score": ("a number or null", lambda v: v is None or _number(v, low=None)),
    "status": ("a string", lambda v: isinstance(v, str)),
    "answer": ("a string or null", lambda v: v is None or isinstance(v, str)),
    "answers": ("a list of strings or null", lambda v: v is None or (isinstance(v, list) and all(
        a is None or isinstance(a, str) for a in v))),
    "steps": ("a whole number", lambda v: _number(v, whole=True)),
    "tokens": ("an object of whole numbers", lambda v: isinstance(v, dict) and all(
        _number(n, whole=True) for n in v.values())),
    "cost": ("a number of US dollars or null", lambda v: v is None or _number(v)),
    "judge_cost": ("a number of US dollars or null", lambda v: v is None or _number(v)),
    "latency": ("a number of seconds or null", lambda v: v is None or _number(v)),
    "elapsed": ("a number of seconds or null", lambda v: v is None or _number(v)),
    "sessions": ("a list of strings", _strings),
    "session": ("a string or null", lambda v: v is None or isinstance(v, str)),
    "workspace": ("a path inside the results folder", _relative),
    "wrote": ("a list of strings", _strings),
    "checks": ("a list of objects", lambda v: isinstance(v, list) and all(isinstance(c, dict) for c in v)),
    "error": ("a string or null", lambda v: v is None or isinstance(v, str)),
    "tags": ("a list of strings", _strings),
    "finished_at": ("a number", lambda v: _number(v, low=None)),
}
_REQUIRED = ("sample", "case", "model", "outcome")


def result_problem(result: Any) -> str | None:
    """What is wrong with a result line's value (None: nothing)."""
    if not isinstance(result, dict):
        return f"a JSON object, not {type(result).__name__}"
    for key in _REQUIRED:
        if key not in result:
            return f"no {key!r}"
    for key, (what, ok) in _FIELDS.items():
        if key in result and not ok(result[key]):
            return f"{key!r} must be {what}, not {json.dumps(result[key])[:60]}"
    for check in result.get("checks", ()):
        for key, (what, ok) in _CHECK_FIELDS.items():
            if key in check and not ok(check[key]):
                return f"a check's {key!r} must be {what}, not {json.dumps(check[key])[:60]}"
    return None


_CHECK_FIELDS: dict[str, tuple[str, Any]] = {
    "check": ("a string", lambda v: isinstance(v, str)), "score": ("a number", lambda v: _number(v, low=None)),
    "passed": ("true or false", lambda v: isinstance(v, bool)), "detail": ("a string", lambda v: isinstance(v, str)),
    "cost": ("a number or null", lambda v: v is None or _number(v)),
    "tokens": ("a whole number", lambda v: _number(v, whole=True)),
}


def open_run_folder(folder: Path, manifest: Mapping[str, Any]) -> bool:
    """Make `folder` the results folder of the run `manifest` describes. True when it continues that same run
    (the folder had it already), False for a new one; `UserError` when the folder holds another run."""
    path = folder / MANIFEST
    try:
        old = load_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        old = None
    except (OSError, ValueError) as e:
        raise UserError(f"{path} cannot be read ({e}); give another --out") from None
    if old is not None:
        problem = manifest_problem(old)
        if problem:
            raise UserError(f"{path}: not a run as shou writes it: {problem}; give another --out")
        differs = [k for k in ("kind", "suite", "cases", "models", "epochs") if old.get(k) != manifest.get(k)]
        if differs:
            raise UserError(f"{folder} holds another run (its {', '.join(differs)} differ); give a new --out, or "
                            "the same command as before to continue it")
        return True
    if folder.exists() and any(p.name != "work" for p in folder.iterdir()):
        raise UserError(f"{folder} is not empty and holds no shou run; give a new --out")
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**manifest, "created": time.time()}, indent=1), encoding="utf-8")
    os.replace(tmp, path)
    return False


def manifest_problem(manifest: Any) -> str | None:
    """What is wrong with a `run.json`'s value (None: nothing): the page shows its start time and kind."""
    if not isinstance(manifest, dict):
        return f"a JSON object, not {type(manifest).__name__}"
    created = manifest.get("created")
    if created is not None:
        try:  # the page prints it as a date: 1e30 is an OverflowError there
            ok = _number(created) and time.localtime(created).tm_year < 10000
        except (OverflowError, OSError, ValueError):
            ok = False
        if not ok:
            return f"'created' must be a time in seconds since 1970, not {json.dumps(created)[:40]}"
    for key in ("kind", "suite", "source", "shou"):
        if key in manifest and not isinstance(manifest[key], str):
            return f"{key!r} must be a string"
    return None


def default_folder(kind: str, root: Path | None = None) -> Path:
    """A new folder under `shou-results/` named by the time and the kind of run."""
    base = (root or Path.cwd()) / "shou-results"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = base / f"{stamp}-{kind}"
    n = 1
    while folder.exists():
        n += 1
        folder = base / f"{stamp}-{kind}-{n}"
    return folder
