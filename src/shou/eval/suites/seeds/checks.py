"""The seeds suite's Python checks: what a plain answer or file check cannot say.

Each is `check(answer, workspace) -> bool`. The clock checks compare with the date of the moment they run
(UTC); a run that crossed midnight a minute before may have written the day before, which is allowed. The
log checks read the sample's session log (`.shou/shou.db`, closed by the time checks run) for what the
task asked to be done a certain way: through the MCP time server, by a sub-agent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from shou.eval.checks import read_workspace_file

MIDNIGHT_SLACK = timedelta(minutes=30)  # longer than any case may run


def _text(workspace: Path, rel: str) -> str | None:
    data = read_workspace_file(workspace, rel)
    return None if data is None else data.decode("utf-8", "replace")


def _today_utc(text: str | None) -> bool:
    """`text` is the UTC date of now (or of a moment ago, across midnight) as YYYY-MM-DD, and nothing else."""
    if text is None:
        return False
    now = datetime.now(UTC)
    return text.strip() in {now.date().isoformat(), (now - MIDNIGHT_SLACK).date().isoformat()}


def today_txt_is_today(answer: str, workspace: Path) -> bool:
    """today.txt holds today's UTC date."""
    return _today_utc(_text(workspace, "today.txt"))


def date_txt_is_today(answer: str, workspace: Path) -> bool:
    """date.txt holds today's UTC date."""
    return _today_utc(_text(workspace, "date.txt"))


def people_json(answer: str, workspace: Path) -> bool:
    """people.json is the JSON list of Ada (36) and Linus (54), in that order, with exactly name and age."""
    text = _text(workspace, "people.json")
    if text is None:
        return False
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return data == [{"name": "Ada", "age": 36}, {"name": "Linus", "age": 54}]


def squares(answer: str, workspace: Path) -> bool:
    """square1.txt ... square6.txt each hold the square of their number (and nothing else)."""
    for n in range(1, 7):
        text = _text(workspace, f"square{n}.txt")
        if text is None or text.strip() != str(n * n):
            return False
    return _text(workspace, "square7.txt") is None and _text(workspace, "square0.txt") is None


def _tool_calls(workspace: Path) -> Iterator[tuple[str, bool]]:
    """(name, failed) of every tool call the sample's runs finished, sub-runs' and code's included."""
    from shou.events import ToolCallFinished
    from shou.store.sqlite import SQLiteStore

    path = workspace / ".shou" / "shou.db"
    if not path.is_file() or path.is_symlink():
        return
    store = SQLiteStore(path, readonly=True)
    try:
        for session in store.sessions():
            for _, event in store.rows(session.name):
                if isinstance(event, ToolCallFinished):
                    yield event.name, event.is_error
    finally:
        store.close()


def used_mcp_time(answer: str, workspace: Path) -> bool:
    """A tool of the MCP time server (`time__...`) was called and answered."""
    return any(re.match(r"time__\w+$", name) and not failed for name, failed in _tool_calls(workspace))


def delegated(answer: str, workspace: Path) -> bool:
    """The work was handed to a sub-agent: a `delegate` call that came back without an error."""
    return any(name == "delegate" and not failed for name, failed in _tool_calls(workspace))


def used_skill(answer: str, workspace: Path) -> bool:
    """A skill was loaded with `use_skill`."""
    return any(name == "use_skill" and not failed for name, failed in _tool_calls(workspace))
