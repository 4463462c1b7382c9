"""The checkpoint gate (agent/checkpointing.py `_may_change_files`): a call whose tool gets no context skips the
recorder, but not what the recorder's first lookup did before anything of the run is mixed in: the changes of a
command a killed process left unrecorded are recovered before the run's first call of any kind."""

from __future__ import annotations

from pathlib import Path

from shou import Agent, ScriptedModel, SQLiteStore, tool
from shou.checkpoints import CallRecorder, precapture, scan
from shou.checkpoints.journal import book_for
from shou.tools.base import ToolContext


def test_a_killed_command_s_changes_are_recovered_before_a_plain_tool_changes_files(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "note.txt").write_text("the person's note")
    book = book_for(ws)
    before = scan(ws)
    CallRecorder(book, "s", "s", "r0", 1, "c0", "shell").command_starts(before, precapture(book, before))
    (ws / "cmd.txt").write_text("made by the killed command")  # then the process was killed

    @tool
    def save(text: str) -> str:
        """Save a note (a plain function: it writes the workspace without the context)."""
        (ws / "note.txt").write_text(text)
        return "saved"

    @tool
    def look(ctx: ToolContext) -> str:
        """Look at the workspace (handed the context: checkpointed)."""
        return "ok"

    model = ScriptedModel([{"tool_calls": [{"name": "save", "arguments": {"text": "the tool's note"}}]},
                           {"tool_calls": [{"name": "look", "arguments": {}}]}, {"text": "done"}])
    store = SQLiteStore(tmp_path / "s.db")
    assert Agent(model, [save, look], workspace=ws, store=store).run("go", session="s").answer == "done"
    killed = sorted({str(r.get("path")) for r in book.records("s") if r.get("call") == "c0" and r.get("path")})
    # The killed command made cmd.txt; note.txt is the plain tool's, later: `shou undo` of the command must not
    # put the person's note back over it.
    assert killed == ["cmd.txt"]
