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
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..errors import UserError

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
    """The whole result lines of a results folder (a torn last line is skipped)."""
    path = folder / RESULTS
    try:
        f = open(path, encoding="utf-8")  # noqa: SIM115
    except FileNotFoundError:
        return
    with f:
        for line in f:
            if not line.endswith("\n"):
                break
            try:
                result = json.loads(line)
            except ValueError:
                continue
            if isinstance(result, dict) and isinstance(result.get("sample"), str):
                yield result


def open_run_folder(folder: Path, manifest: Mapping[str, Any]) -> bool:
    """Make `folder` the results folder of the run `manifest` describes. True when it continues that same run
    (the folder had it already), False for a new one; `UserError` when the folder holds another run."""
    path = folder / MANIFEST
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        old = None
    except (OSError, ValueError) as e:
        raise UserError(f"{path} cannot be read ({e}); give another --out") from None
    if old is not None:
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
