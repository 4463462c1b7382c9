"""A sample's transcript and trace for the HTML report, read from its session log and cut to a bounded size.

The transcript is the conversation the session's events fold into (`shou.session.MessageFold`, what `shou show`
prints); the trace is what `shou trace --json` gives (`shou.trace`), except that each model call's request names
its messages by content hash instead of repeating them: the contents go into one table the whole page shares,
so the system prompt and the tool specs that every request of every sample repeats are in the page once.

Everything here comes from a run and is untrusted: it is data for the page's script, which shows it as text.
A log that cannot be read (missing, damaged, in a shared store) gives a note, never an exception: the report
is written at the end of an evaluation, which it must not fail.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import trace as tr
from ..events import CALL_NOTICES
from ..session import MessageFold

__all__ = ["TEXT_CAP", "Contents", "cap", "commands", "read_sample", "workspace"]

TEXT_CAP = 20_000  # characters of one text (a message, a tool result, arguments) the page holds
_DB = (".shou", "shou.db")


class Contents:
    """The request contents (messages and tool specs, by content hash) of every embedded sample, each once.

    What a sample adds waits in `pending` until the page takes the sample (`accept`) or leaves it out for its
    size (`reject`), so a sample left out leaves nothing behind."""

    def __init__(self) -> None:
        self.items: dict[str, Any] = {}
        self.pending: dict[str, Any] = {}
        self.size = 0  # roughly, the characters the accepted ones take in the page
        self.pending_size = 0

    def add(self, refs: Sequence[str], found: Mapping[str, Any]) -> None:
        """Keep the contents `refs` name that `found` (a session's logged contents) holds and the table does not
        have yet. A ref `found` lacks (retention deleted it) stays unknown: the page says it was pruned."""
        for ref in refs:
            if ref and ref not in self.items and ref not in self.pending and ref in found:
                item = cap(found[ref])
                self.pending[ref] = item
                self.pending_size += len(ref) + _size(item)

    def accept(self) -> int:
        """Take what is pending into the table; the characters that added."""
        added = self.pending_size
        self.items.update(self.pending)
        self.size += added
        self.reject()
        return added

    def reject(self) -> None:
        """Drop what is pending."""
        self.pending, self.pending_size = {}, 0


def cap(value: Any, limit: int = TEXT_CAP, whole: str = "the session log") -> Any:
    """`value` (JSON) with every string cut to `limit` characters (saying how long it was and that `whole` has
    it all) and image data replaced by its size: the page holds what a person reads, the log the rest."""
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        return value[:limit] + f"\n… [cut: {len(value):,} characters in all; {whole} has them whole]"
    if isinstance(value, list | tuple):
        return [cap(v, limit, whole) for v in value]
    if isinstance(value, dict):
        if value.get("type") == "image_url":
            image = value.get("image_url")
            url = image.get("url", "") if isinstance(image, dict) else image
            return {"type": "image_url", "size": len(str(url or ""))}
        return {str(k): cap(v, limit, whole) for k, v in value.items()}
    return value


def _size(value: Any) -> int:
    """Roughly how many characters `value` takes as JSON (no need to serialize it to know)."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, list | tuple):
        return sum(_size(v) + 1 for v in value) + 2
    if isinstance(value, dict):
        return sum(len(str(k)) + _size(v) + 4 for k, v in value.items()) + 2
    return 8


def workspace(folder: Path, result: Mapping[str, Any]) -> Path:
    """The sample's workspace (its line names it relative to the results folder)."""
    return folder / str(result.get("workspace") or Path("work") / str(result.get("sample", "")))


def commands(folder: Path, result: Mapping[str, Any]) -> list[str]:
    """The commands that show a sample's conversation and trace from its workspace's log."""
    ws = workspace(folder, result)
    out = []
    for session in _sessions(result):
        out.append(f"shou show {shlex.quote(session)} -w {shlex.quote(str(ws))}")
        out.append(f"shou trace {shlex.quote(session)} -w {shlex.quote(str(ws))}")
    return out


def _sessions(result: Mapping[str, Any]) -> list[str]:
    names = result.get("sessions")
    if isinstance(names, list) and names:
        return [str(n) for n in names]
    return [str(result.get("session") or result.get("sample", ""))]


def read_sample(folder: Path, result: Mapping[str, Any], contents: Contents) -> dict[str, Any]:
    """The sample's sessions (transcript and trace of each) as the page's data, its request contents added to
    `contents`; `{"note": why}` when its log cannot be read."""
    from ..store.sqlite import SQLiteStore
    from ..workspace import state_database

    ws = workspace(folder, result)
    if not _inside(ws, folder):
        return {"note": f"its workspace {str(result.get('workspace'))!r} is outside the results folder; not read"}
    if not ws.joinpath(*_DB).is_file():
        return {"note": f"no session log at {ws.joinpath(*_DB)} (a run with --store keeps its sessions in that "
                        "store, and a sample that errored before its run started has none)"}
    try:
        with SQLiteStore(state_database(ws, _DB[1]), readonly=True) as store:
            return {"sessions": [_session(store, name, contents) for name in _sessions(result)]}
    except Exception as e:  # whatever a damaged or foreign file does, the report is still written, with a note
        return {"note": f"its session log could not be read ({type(e).__name__}: {cap(str(e), 500)})"}


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except (ValueError, OSError):
        return False
    return True


def _session(store: Any, name: str, contents: Contents) -> dict[str, Any]:
    """One session: its conversation and its runs' traces, read from the log once."""
    if not store.exists(name):
        return {"name": name, "note": "this session is not in the log"}
    rows = tr.logged_rows(store, "session = ?", (name,))
    fold = MessageFold()
    for _, _, event in rows:
        fold.apply(event)
    runs = tr.build(rows)
    out: dict[str, Any] = {"name": name, "transcript": cap([m.to_wire() for m in fold.messages]),
                           "runs": [_run(run, contents) for run in runs]}
    if fold.conversation.summary:
        out["summary"] = cap(fold.conversation.summary)
    return out


def _run(run: tr.RunTrace, contents: Contents) -> dict[str, Any]:
    """`shou trace --json`'s run, each request naming its messages and tools by hash (see `Contents`)."""
    data = tr.run_json(run)  # calls not resolved: their messages are in `contents`, not repeated per call
    # as `shou trace` shows them: a retry or a failed attempt is on its call (`notes`, `error`), not a row
    data["notices"] = [n for n in data["notices"] if n["kind"] not in CALL_NOTICES]
    for call, out in zip(run.model_calls, data["model_calls"], strict=True):
        request = out["request"]
        request["refs"] = list(call.message_refs)
        request["tools_ref"] = call.tools_ref
        request["pruned"] = sum(1 for k in (*call.message_refs, call.tools_ref) if k and k not in call.contents)
        contents.add((*call.message_refs, call.tools_ref), call.contents)
    return cap(data)
