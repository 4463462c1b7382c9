"""Lone surrogates (U+D800-U+DFFF, text no UTF-8 encodes) repaired where they would end a run, and kept exactly
where a file name must come back as it was (the checkpoint journal)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shou.agent.emitter import Emitter
from shou.checkpoints.journal import dumps, loads
from shou.events import TextDelta, ToolCallDelta, ToolCallFinished
from shou.redact import Redactor
from shou.session import Session
from shou.store.sqlite import SQLiteStore
from shou.wellformed import well_formed, well_formed_text

ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()))  # surrogates and NUL included


def encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@given(ANY_TEXT)
def test_repaired_text_always_encodes_and_good_text_is_kept(text: str) -> None:
    fixed = well_formed_text(text)
    assert encodes(fixed)
    if encodes(text):
        assert fixed is text
    else:
        assert "\ufffd" in fixed or len(fixed) < len(text)  # a lone one replaced, or a pair joined


def test_each_lone_surrogate_is_one_replacement_and_a_pair_is_its_character() -> None:
    assert well_formed_text("a\ud800b\udcff") == "a\ufffdb\ufffd"
    assert well_formed_text("\ud83d\ude00 x\ude00\ud83d") == "\U0001f600 x\ufffd\ufffd"
    assert well_formed({"k\udcff": ["v\ud800", 1, None], "n": 2.5}) == {"k\ufffd": ["v\ufffd", 1, None], "n": 2.5}


@given(st.dictionaries(ANY_TEXT, st.lists(ANY_TEXT, max_size=3), max_size=5), ANY_TEXT)
def test_the_journal_gives_back_every_name_exactly(files: dict[str, list[str]], path: str) -> None:
    record = {"k": "before", "path": path, "files": files}
    assert loads(dumps(record)) == record


def test_the_emitter_repairs_what_it_logs_and_what_it_streams(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    seen: list = []
    secret = "sk-live-0123456789abcdef"
    emitter = Emitter(Session("s", store), Redactor([secret]), consumer=seen.append)
    emitter.emit(ToolCallFinished("r", 1, "c1", "ls", f"{secret} caf\udce9"))  # redacted and repaired both
    emitter.emit(TextDelta("r", 2, "a\ud800b"))
    emitter.emit(ToolCallDelta("r", 2, 0, "t\udcff", '{"p": "\udcff"}'))
    emitter.emit(TextDelta("r", 3, "end"))  # the call's stream ends: what it held back is given out
    emitter.commit()
    [logged] = store.events("s")
    assert isinstance(logged, ToolCallFinished) and logged.content == "[redacted] caf\ufffd"
    assert seen[0] == logged
    assert "".join(e.text for e in seen if isinstance(e, TextDelta)) == "a\ufffdbend"
    calls = [e for e in seen if isinstance(e, ToolCallDelta)]
    assert "".join(e.arguments for e in calls) == '{"p": "\ufffd"}' and calls[0].name == "t\ufffd"
    assert all(encodes(str(e)) for e in seen)


def test_a_secret_spelled_as_a_surrogate_pair_is_redacted_before_it_is_repaired() -> None:
    """emit() redacts first and repairs after (`_encoded` joins a surrogate pair written as two code points into
    the character it spells): a secret holding an astral character (an emoji in a password), spelled as two
    surrogates in an event, is missed by the redactor and then written whole to the log and the consumer.
    The streamed fragments repair first, then redact, and hold."""
    from shou.agent.emitter import Emitter
    from shou.events import ToolCallFinished
    from shou.redact import Redactor
    from shou.session import Session

    secret = "p\U0001F600ssw0rd-9f8e7d6c"
    spelled = "p\ud83d\ude00ssw0rd-9f8e7d6c"
    got: list = []
    emitter = Emitter(Session("s", None), Redactor([secret]), consumer=got.append)
    emitter.emit(ToolCallFinished("r", 1, "c1", "env", "ok", details={"PASSWORD": spelled}))
    [event] = got
    assert secret not in repr(event.to_dict()), event.to_dict()


def test_a_deep_mcp_reply_with_a_surrogate_escape_does_not_raise_out_of_the_line_reader() -> None:
    # _well_formed_line re-parsed a line with json.loads when it saw a surrogate escape: a deeply nested reply (well
    # within the 5 MB bound) raised RecursionError, which is no ValueError, out of CappedLines and into the SDK's
    # stdout reader task. It works on the text now.
    line = '{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"x\\udcffy"}],"deep":' + \
        "[" * 3000 + "]" * 3000 + "}}"
    from shou.wellformed import well_formed_json as _well_formed_line

    fixed = _well_formed_line(line)  # made over on its text: no parse, however deep
    assert "\\udcff" not in fixed and '"x\\ufffdy"' in fixed and fixed.endswith("]" * 3000 + "}}")


def test_a_reply_with_an_early_surrogate_escape_and_a_deep_tail_is_made_over_without_raising() -> None:
    # json.loads takes 600 levels; ill_formed() answers True at the first field without going down; then
    # well_formed() walks the whole value, two frames a level, and raises RecursionError outside the try: the
    # reader ends, as the 3000-deep reply did before 509887e.
    from shou.wellformed import well_formed_json as _well_formed_line

    line = '{"jsonrpc":"2.0","id":1,"result":{"a":"\\udcff","b":' + "[" * 600 + "]" * 600 + "}}"
    fixed = _well_formed_line(line)
    assert "\\udcff" not in fixed


def test_an_event_type_of_the_caller_s_own_is_logged_repaired(tmp_path: Path) -> None:
    """One the log cannot read back (not in EVENT_TYPES) cannot be rebuilt from its JSON: its row is repaired and
    redacted all the same, and the run goes on (event_from_dict's ValueError ended it)."""
    import dataclasses
    import sqlite3

    from shou.events import Event

    @dataclasses.dataclass(frozen=True, slots=True)
    class Mine(Event):
        type: ClassVar[str] = "mine"
        text: str = ""

    store = SQLiteStore(tmp_path / "s.db")
    seen: list = []
    emitter = Emitter(Session("s", store), Redactor(["sk-live-0123456789abcdef"]), consumer=seen.append)
    emitter.emit(Mine("r", text="caf\udce9 sk-live-0123456789abcdef"))
    emitter.commit()
    store.close()
    [data] = [row[0] for row in sqlite3.connect(tmp_path / "s.db").execute("SELECT data FROM events")]
    assert "caf\ufffd [redacted]" in data and len(seen) == 1


@pytest.mark.parametrize("depth", [600, 5000])
def test_a_plan_nested_as_deep_as_json_takes_is_read_not_a_recursion_error(depth: int) -> None:
    # Review 49, F6: the walk recursed two frames a level; a model's plan 600 deep ended the run.
    from shou.agent.turn import tool_arguments
    from shou.messages import Message, ToolCall

    args = '{"plan": ' + "[" * depth + '"\\ud800"' + "]" * depth + "}"
    message = Message(role="assistant", content="", tool_calls=[ToolCall(id="c1", name="plan", arguments=args)])
    got = tool_arguments(message, "plan")
    if depth > 1000:  # past what json's parser takes: no plan, as for any text that is not one
        assert got is None
        return
    assert got is not None
    inner = got["plan"]
    for _ in range(depth - 1):
        inner = inner[0]
    assert inner == ["\ufffd"]
