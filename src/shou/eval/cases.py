"""Cases and suites: what `shou batch` and `shou eval` run.

A case is one task (or several, run one after another in the same workspace, each in a session of its own),
the files its workspace starts with, the checks its result must pass, its limits, and optionally the
scripted solution an oracle model replays. A suite is a list of cases with a name. Both come from a JSONL
file (one case per line), a suite folder (`suite.jsonl` beside the fixtures and check modules it names),
or Python (`Case(...)`, `Suite(...)`).

A case line:
```
{"id": "add", "task": "What is 2+3?", "files": "fixtures/calc" | {"notes.txt": "..."},
 "checks": [{"answer_contains": "5"}, {"file": "out.txt", "equals": "5\\n"}, {"python": "checks.py:ok"},
            {"judge": "The answer says 5 and nothing wrong."}],
 "model": "deepseek:deepseek-chat", "settings": {"tools": ["calculator"]}, "plan": false, "code": false,
 "limits": {"steps": 10, "time": 120, "tokens": 20000, "cost": 0.05}, "solution": [{...turn...}, ...]}
```
Placeholders: `{{workspace}}` (the sample's workspace, absolute) and `{{server}}` (the URL of the suite's
`www/` folder, served on loopback while the run lasts) are replaced in tasks, solutions and checks' texts
when a sample starts, so a case can name the page it reads or the file:// URL it opens.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..jsonfile import load_json
from ..wellformed import ill_formed
from .checks import Check, check_from_dict

__all__ = ["Case", "Limits", "Suite", "bind", "load_cases"]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_CASE_KEYS = {"id", "task", "files", "checks", "model", "settings", "plan", "code", "reflect", "limits", "solution",
              "tags", "metadata"}
_LIMIT_KEYS = {"steps": "max_steps", "time": "run_timeout", "tokens": "token_budget", "cost": "max_cost"}


@dataclass(frozen=True)
class Limits:
    """A case's limits: steps, seconds of wall time, tokens (input + output) and cost in USD (None: the
    configured default)."""

    steps: int | None = None
    time: float | None = None
    tokens: int | None = None
    cost: float | None = None

    def fields(self) -> dict[str, Any]:
        """The AgentConfig fields these limits set."""
        return {_LIMIT_KEYS[k]: v for k, v in (("steps", self.steps), ("time", self.time), ("tokens", self.tokens),
                                               ("cost", self.cost)) if v is not None}


@dataclass(frozen=True)
class Case:
    """One case. `task` is a string, or several run in order (each a new session in the same workspace: what
    carries over is the workspace and long-term memory). `files` is the fixture its workspace starts as: a
    folder to copy or a mapping of relative paths to contents. `settings` are shou settings for its runs
    (as in shou.toml; they come from the suite's author, so they are trusted like the command line), `plan`,
    `code` and `reflect` the run modes. `solution` is the script an oracle model plays (`--model oracle`)."""

    id: str
    task: str | tuple[str, ...]
    checks: tuple[Check, ...] = ()
    files: Path | Mapping[str, str | bytes] | None = None
    model: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    plan: bool = False
    code: bool = False
    reflect: bool = False
    limits: Limits = field(default_factory=Limits)
    solution: tuple[dict[str, Any], ...] | None = None
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _ID.match(self.id):
            raise UserError(f"case id {self.id!r}: use 1-100 letters, digits, '.', '_' or '-', starting with a letter "
                            "or digit")
        # the type first: `tasks` iterates the task, and a number or None there is a TypeError, not an answer
        if not isinstance(self.task, str | list | tuple) or not self.tasks or \
                not all(isinstance(t, str) and t.strip() for t in self.tasks):
            raise UserError(f"case {self.id}: 'task' must be a non-empty string or a list of them")
        if isinstance(self.files, Mapping):  # checked here so a case made in Python is held to it too
            for rel in self.files:
                problem = fixture_path_problem(rel, self.files)
                if problem:
                    raise UserError(f"case {self.id}: 'files' key {rel!r}: {problem}")
        object.__setattr__(self, "checks", tuple(_as_check(c) for c in self.checks))

    @property
    def tasks(self) -> tuple[str, ...]:
        """The case's tasks, in order."""
        return (self.task,) if isinstance(self.task, str) else tuple(self.task)


@dataclass(frozen=True)
class Suite:
    """A named list of cases (ids unique)."""

    name: str
    cases: tuple[Case, ...]
    source: str = ""
    www: Path | None = None  # served on loopback while the suite runs: `{{server}}` in its cases

    def __post_init__(self) -> None:
        object.__setattr__(self, "cases", tuple(self.cases))
        seen: set[str] = set()
        for case in self.cases:
            if case.id in seen:
                raise UserError(f"suite {self.name}: two cases have the id {case.id!r}")
            seen.add(case.id)

    @classmethod
    def load(cls, path: str | Path, name: str | None = None) -> Suite:
        """A suite from a JSONL file, or a folder holding `suite.jsonl`."""
        p = Path(path).expanduser()
        file = p / "suite.jsonl" if p.is_dir() else p
        if not file.is_file():
            raise UserError(f"no suite at {path}: give a JSONL file of cases or a folder with suite.jsonl")
        www = file.parent / "www"
        return cls(name or (p.name if p.is_dir() else p.stem), tuple(load_cases(file)), str(file.resolve()),
                    www if www.is_dir() else None)


def fixture_path_problem(rel: Any, files: Mapping[str, Any] | None = None) -> str | None:
    """Why `rel` cannot name a fixture file (None: it can). A key must be a file's path relative to the
    workspace, in '/'-separated names: "" and "." are the workspace itself, "d/" a folder, ".." and an absolute
    path leave the workspace, and a key that is the folder of another key's file cannot also be a file."""
    if not isinstance(rel, str):
        return f"a path must be a string, not {type(rel).__name__}"
    if "\0" in rel or "\\" in rel:
        return "a path holds no NUL nor backslash (use '/' between names)"
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return "must be a file's path inside the workspace, such as 'notes.txt' or 'src/a.py' (no '', '.', " \
               "'..', leading or trailing '/')"
    if any(len(p.encode()) > 255 for p in parts) or len(rel.encode()) > 4000:
        return "a name is too long for a file system"
    if files is not None:
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in files:
                return f"its folder {'/'.join(parts[:i])!r} is also given as a file"
    return None


def _as_check(c: Any) -> Check:
    if callable(c) and not isinstance(c, Mapping):
        from .checks import function

        return c if hasattr(c, "describe") else function(c)
    raise UserError(f"a check must be a function or one of shou.eval's checks, not {type(c).__name__}")


def load_cases(file: Path, *, batch: bool = False) -> Iterable[Case]:
    """The cases of a JSONL file (blank lines and lines starting with `#` skipped). Paths in a case (its
    fixture folder, check modules) are relative to the file's folder. `batch`: lines are batch tasks, which
    need no checks; a line without an `id` gets its line number."""
    base = file.parent
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {file}: {e}") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            data = load_json(line)  # nested past the parser: "not JSON (nests deeper ...)", not a crash
        except ValueError as e:
            raise UserError(f"{file}:{n}: not JSON ({e})") from None
        if not isinstance(data, dict):
            raise UserError(f"{file}:{n}: each line must be a JSON object")
        if batch and "id" not in data:
            data = {**data, "id": f"line-{n}"}
        try:
            yield case_from_dict(data, base)
        except UserError as e:
            raise UserError(f"{file}:{n}: {e}") from None


def case_from_dict(data: Mapping[str, Any], base: Path) -> Case:
    """A case from its JSON form (see the module); paths relative to `base`."""
    unknown = set(data) - _CASE_KEYS
    if unknown:
        raise UserError(f"unknown key(s) {', '.join(sorted(unknown))}; a case has {', '.join(sorted(_CASE_KEYS))}")
    for key, value in data.items():  # a JSON escape such as "\ud800" is no character: no file nor log holds it
        try:
            if ill_formed(value):
                raise UserError(f"'{key}' is not valid Unicode (a lone surrogate escape, such as \\ud800)")
        except RecursionError:
            raise UserError(f"'{key}' nests deeper than a case's fields can") from None
    task = data.get("task")
    if isinstance(task, list):
        task = tuple(task)
    files = data.get("files")
    if isinstance(files, str):
        files = (base / files).resolve()
        if not files.is_dir():
            raise UserError(f"'files': {files} is not a folder")
    elif files is not None and not (isinstance(files, dict) and all(isinstance(v, str) for v in files.values())):
        raise UserError("'files' must be a folder (relative to the suite) or an object of path -> text")
    checks = data.get("checks", [])
    if not isinstance(checks, list):
        raise UserError("'checks' must be a list")
    solution = data.get("solution")
    if solution is not None:
        if not isinstance(solution, list | str):
            raise UserError("'solution' must be a list of turns or the path of a script file")
        from ..models.script import load_script

        try:
            solution = tuple(load_script(solution if isinstance(solution, list) else str(base / solution)))
        except (ValueError, OSError, TypeError, RecursionError) as e:  # a turn's field of a wrong type
            raise UserError(f"'solution': {e or type(e).__name__}") from None
    settings = data.get("settings", {})
    if not isinstance(settings, dict):
        raise UserError("'settings' must be an object of shou settings")
    _check_plain_fields(data)
    limits = data.get("limits", {})
    return Case(
        id=data.get("id", ""), task=task,  # Case checks the task's type and text
        checks=tuple(check_from_dict(c, base) for c in checks), files=files, model=data.get("model"),
        settings=settings, plan=data.get("plan", False), code=data.get("code", False),
        reflect=data.get("reflect", False), limits=Limits(**limits), solution=solution,
        tags=tuple(data.get("tags", ())), metadata=dict(data.get("metadata", {})),
    )


def _check_plain_fields(data: Mapping[str, Any]) -> None:
    """The id, model, modes, tags, metadata and limits of a case line have the JSON types a case takes."""
    if "id" in data and not isinstance(data["id"], str):
        raise UserError(f"'id' must be a string, not {type(data['id']).__name__}")
    model = data.get("model")
    if model is not None and not (isinstance(model, str) and model.strip()):
        raise UserError("'model' must be a model's name, such as \"deepseek:deepseek-chat\"")
    for key in ("plan", "code", "reflect"):  # bool("no") is True: only JSON's true and false say yes and no
        if not isinstance(data.get(key, False), bool):
            raise UserError(f"'{key}' must be true or false")
    tags = data.get("tags", [])  # tuple("ab") would be two tags, tuple(5) a TypeError
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise UserError("'tags' must be a list of strings")
    if not isinstance(data.get("metadata", {}), dict):
        raise UserError("'metadata' must be an object")
    limits = data.get("limits", {})
    if not isinstance(limits, dict) or set(limits) - set(_LIMIT_KEYS):
        raise UserError(f"'limits' must be an object of {', '.join(_LIMIT_KEYS)}")
    for key, value in limits.items():
        _check_limit(key, value)


def _check_limit(key: str, value: Any) -> None:
    """A limit's value as AgentConfig takes it, checked as the case is read: a wrong one found later, when
    the run starts, is a traceback after the progress bar began."""
    integer = key in ("steps", "tokens")
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok and integer:
        ok = isinstance(value, int) and value >= 1
    elif ok:
        ok = value > 0 if key == "time" else value >= 0
    if not ok:
        what = {"steps": "a whole number of steps, at least 1", "tokens": "a whole number of tokens, at least 1",
                "time": "a number of seconds, more than 0", "cost": "a cost in US dollars, not negative"}[key]
        raise UserError(f"'limits' {key!r} must be {what}, not {json.dumps(value)[:40]}")


def select(cases: Sequence[Case], ids: Sequence[str] | None, tags: Sequence[str] | None) -> list[Case]:
    """The cases named by `ids` (all when None) that carry one of `tags` (any when None)."""
    out = list(cases)
    if ids:
        known = {c.id for c in cases}
        missing = [i for i in ids if i not in known]
        if missing:
            raise UserError(f"no case with id {', '.join(missing)}")
        out = [c for c in out if c.id in set(ids)]
    if tags:
        out = [c for c in out if set(c.tags) & set(tags)]
    return out


def bind(case: Case, values: Mapping[str, str]) -> Case:
    """`case` with `{{NAME}}` replaced by `values[NAME]` in its tasks, its solution's texts and its checks'."""
    if not values:
        return case

    def sub(x: Any) -> Any:
        if isinstance(x, str):
            for name, value in values.items():
                x = x.replace("{{" + name + "}}", value)
            return x
        if isinstance(x, list | tuple):
            return type(x)(sub(v) for v in x)
        if isinstance(x, dict):
            return {k: sub(v) for k, v in x.items()}
        return x

    checks = tuple(dataclasses.replace(c, **{f.name: sub(getattr(c, f.name)) for f in dataclasses.fields(c)
                                            if isinstance(getattr(c, f.name), str)})
                   if dataclasses.is_dataclass(c) else c for c in case.checks)
    return dataclasses.replace(case, task=sub(case.task), solution=sub(case.solution), checks=checks)
