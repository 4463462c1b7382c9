"""Checks: how a case's outcome is judged.

A check is called with the `Outcome` (the final answer, each task's answer, the run's status and the
workspace as the run left it) and gives a `Verdict`: a score from 0 to 1 and whether it passed. A plain
function `check(answer, workspace) -> bool | float` is a check too (`function`), sync or async; a float
passes at 1.0 unless it says otherwise. A case passes when every check passes; its score is their mean.

Workspace files are read the way the file tools read them (no symlink followed, nothing outside the
workspace): what the run wrote is untrusted, and a report must not end up holding a host file.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import UserError
from .outcome import Outcome, Verdict

__all__ = ["Check", "Outcome", "Verdict", "answer_contains", "answer_equals", "answer_matches", "check_from_dict",
           "file_contains", "file_equals", "file_exists", "file_matches", "function", "judge", "status_is"]

MAX_FILE_BYTES = 1_000_000


class Check(Protocol):
    """Anything that judges an outcome."""

    def describe(self) -> str:
        """A short name for reports."""
        ...

    def __call__(self, outcome: Outcome) -> Awaitable[Verdict]: ...


def _clip(text: str, n: int = 200) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


@dataclass(frozen=True)
class _AnswerCheck:
    how: str  # equals | contains | matches
    expected: str
    ignore_case: bool = False

    def describe(self) -> str:
        return f"answer {self.how} {_clip(self.expected, 60)!r}"

    async def __call__(self, outcome: Outcome) -> Verdict:
        ok = _compare(self.how, outcome.answer, self.expected, self.ignore_case)
        return Verdict(self.describe(), float(ok), ok, "" if ok else f"the answer was {_clip(outcome.answer)!r}")


def _compare(how: str, got: str, expected: str, ignore_case: bool) -> bool:
    if how == "matches":
        return re.search(expected, got, re.IGNORECASE if ignore_case else 0) is not None
    if ignore_case:
        got, expected = got.casefold(), expected.casefold()
    if how == "equals":
        return got.strip() == expected.strip()
    return expected in got


def answer_equals(text: str, *, ignore_case: bool = False) -> Check:
    """The final answer, stripped of surrounding whitespace, is exactly `text`."""
    return _AnswerCheck("equals", text, ignore_case)


def answer_contains(text: str, *, ignore_case: bool = False) -> Check:
    """The final answer contains `text`."""
    return _AnswerCheck("contains", text, ignore_case)


def answer_matches(pattern: str, *, ignore_case: bool = False) -> Check:
    """`re.search(pattern, answer)` finds something."""
    try:
        re.compile(pattern)
    except re.error as e:
        raise UserError(f"answer_matches: {pattern!r} is not a regular expression: {e}") from None
    return _AnswerCheck("matches", pattern, ignore_case)


@dataclass(frozen=True)
class _StatusCheck:
    status: str

    def describe(self) -> str:
        return f"status is {self.status}"

    async def __call__(self, outcome: Outcome) -> Verdict:
        ok = outcome.status == self.status
        return Verdict(self.describe(), float(ok), ok, "" if ok else f"the run ended {outcome.status}")


def status_is(status: str) -> Check:
    """The last run ended with `status` (e.g. `completed`, or `budget` for a case about limits)."""
    return _StatusCheck(status)


def read_workspace_file(workspace: Path, rel: str) -> bytes | None:
    """`rel` in `workspace` as the file tools would read it (no symlink anywhere, at most 1 MB); None if
    there is no such regular file."""
    from ..trust import read_closing
    from ..workspace import open_beneath

    parts = tuple(p for p in Path(rel).parts if p not in ("", "."))
    if not parts or ".." in parts or Path(rel).is_absolute():
        return None
    try:
        fd = open_beneath(workspace, parts, os.O_RDONLY)
    except Exception:
        return None
    return read_closing(fd, MAX_FILE_BYTES)


@dataclass(frozen=True)
class _FileCheck:
    path: str
    how: str  # exists | missing | equals | contains | matches
    expected: str = ""

    def describe(self) -> str:
        if self.how in ("exists", "missing"):
            return f"{self.path} {'exists' if self.how == 'exists' else 'does not exist'}"
        return f"{self.path} {self.how} {_clip(self.expected, 60)!r}"

    async def __call__(self, outcome: Outcome) -> Verdict:
        data = await asyncio.to_thread(read_workspace_file, outcome.workspace, self.path)
        if self.how == "missing":
            ok = data is None
            return Verdict(self.describe(), float(ok), ok, "" if ok else "the file is there")
        if data is None:
            return Verdict(self.describe(), 0.0, False, f"no file {self.path} in the workspace")
        if self.how == "exists":
            return Verdict(self.describe(), 1.0, True)
        text = data.decode("utf-8", "replace")
        ok = _compare(self.how, text, self.expected, False) if self.how != "equals" else text == self.expected
        return Verdict(self.describe(), float(ok), ok, "" if ok else f"the file holds {_clip(text)!r}")


def file_exists(path: str, exists: bool = True) -> Check:
    """The workspace has (or, with `exists=False`, no longer has) the regular file `path`."""
    return _FileCheck(path, "exists" if exists else "missing")


def file_equals(path: str, text: str) -> Check:
    """The workspace file `path` holds exactly `text`."""
    return _FileCheck(path, "equals", text)


def file_contains(path: str, text: str) -> Check:
    """The workspace file `path` contains `text`."""
    return _FileCheck(path, "contains", text)


def file_matches(path: str, pattern: str) -> Check:
    """`re.search(pattern)` finds something in the workspace file `path`."""
    return _FileCheck(path, "matches", pattern)


@dataclass(frozen=True)
class _FunctionCheck:
    fn: Callable[..., Any]
    name: str
    threshold: float = 1.0

    def describe(self) -> str:
        return self.name

    async def __call__(self, outcome: Outcome) -> Verdict:
        try:
            if inspect.iscoroutinefunction(self.fn):
                value = await self.fn(outcome.answer, outcome.workspace)
            else:
                value = await asyncio.to_thread(self.fn, outcome.answer, outcome.workspace)
        except Exception as e:  # a failing check fails the case, with why; it does not stop the evaluation
            return Verdict(self.name, 0.0, False, f"the check raised {type(e).__name__}: {_clip(str(e))}")
        if isinstance(value, bool):
            return Verdict(self.name, float(value), value)
        if isinstance(value, int | float) and 0 <= value <= 1:
            return Verdict(self.name, float(value), value >= self.threshold)
        return Verdict(self.name, 0.0, False, f"the check returned {_clip(repr(value))}, not a bool or a number "
                                              "from 0 to 1")


def function(fn: Callable[..., Any], *, name: str | None = None, threshold: float = 1.0) -> Check:
    """`fn(answer, workspace) -> bool | float` (sync or async) as a check; a float passes at `threshold`."""
    return _FunctionCheck(fn, name or getattr(fn, "__name__", "check"), threshold)


def judge(rubric: str, *, model: str | None = None, threshold: float = 0.5) -> Check:
    """An LLM judge: `model` (a model spec; default the evaluation's judge model, else the configured one)
    reads the task, the answer and `rubric` and gives a score; it passes at `threshold`. Its calls' cost is
    counted with the case's."""
    from .judge import Judge

    return Judge(rubric, model, threshold)


def _load_function(ref: str, base: Path) -> Callable[..., Any]:
    """`file.py:name` (relative to `base`) -> the function. The suite's own code: trusted like --functions."""
    file, sep, name = ref.rpartition(":")
    if not sep or not file or not name:
        raise UserError(f"python check {ref!r}: give FILE.py:FUNCTION")
    path = (base / file).resolve()
    spec = importlib.util.spec_from_file_location(f"shou_eval_checks_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise UserError(f"python check {ref!r}: no Python file {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise UserError(f"python check {ref!r}: {path} failed to load: {type(e).__name__}: {e}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UserError(f"python check {ref!r}: {path} has no function {name}")
    return fn


_FILE_HOW = ("equals", "contains", "matches", "exists")


def check_from_dict(data: Any, base: Path) -> Check:
    """A check from its JSON form: `{"answer_equals"|"answer_contains"|"answer_matches": TEXT,
    "ignore_case"?}`, `{"file": PATH, "equals"|"contains"|"matches": TEXT}` or `{"file": PATH, "exists": BOOL}`,
    `{"status": STATUS}`, `{"python": "FILE.py:FUNCTION", "threshold"?}`, `{"judge": RUBRIC, "model"?,
    "threshold"?}`."""
    if not isinstance(data, Mapping):
        raise UserError(f"a check must be an object, not {json.dumps(data)[:80]}")
    ignore_case = _flag(data, "ignore_case")
    for key, make in (("answer_equals", answer_equals), ("answer_contains", answer_contains),
                      ("answer_matches", answer_matches)):
        if key in data:
            return make(_text(data, key), ignore_case=ignore_case)
    if "file" in data:
        path = _text(data, "file")
        hows = [h for h in _FILE_HOW if h in data]
        if len(hows) != 1:
            raise UserError(f"file check {path!r}: give one of {', '.join(_FILE_HOW)}")
        if hows[0] == "exists":
            return file_exists(path, _flag(data, "exists"))
        return _FileCheck(path, hows[0], _text(data, hows[0]))
    if "status" in data:
        return status_is(_text(data, "status"))
    if "python" in data:
        ref = _text(data, "python")
        return function(_load_function(ref, base), name=ref, threshold=_threshold(data, 1.0))
    if "judge" in data:
        model = data.get("model")
        if model is not None and not isinstance(model, str):
            raise UserError(f"check 'model' must be a model's name, not {type(model).__name__}")
        return judge(_text(data, "judge"), model=model, threshold=_threshold(data, 0.5))
    raise UserError(f"unknown check {json.dumps(data)[:120]}: use answer_equals, answer_contains, answer_matches, "
                    "file, status, python or judge")


def _flag(data: Mapping[str, Any], key: str) -> bool:
    """A true/false field (bool("no") would be True: only JSON's true and false are taken)."""
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise UserError(f"check {key!r} must be true or false, not {json.dumps(value)[:40]}")
    return value


def _threshold(data: Mapping[str, Any], default: float) -> float:
    """A score from 0 to 1 (float("x") or float([]) would be a traceback)."""
    value = data.get("threshold", default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise UserError(f"check 'threshold' must be a number from 0 to 1, not {json.dumps(value)[:40]}")
    return float(value)


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str):
        raise UserError(f"check {key!r} must be a string, not {type(value).__name__}")
    return value
