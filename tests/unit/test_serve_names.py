"""Each API user's session names (shou.serve.names, RunQueue.session_of), on SQLite and PostgreSQL: a name resolves
in the caller's namespace only, a bare row of theirs from before stays theirs, the local user keeps bare names,
and what is shown is always the caller's own name."""

from __future__ import annotations

from pathlib import Path

from shou.events import RunStarted
from shou.serve.auth import LOCAL_USER
from shou.serve.names import given_name, shown_event, shown_name, stored_name

from ..fixtures.replicas import replica


def test_derived_names_are_per_user_bounded_and_shown_back() -> None:
    a, b = stored_name("alice", "notes"), stored_name("bob", "notes")
    assert a != b and "alice" not in a and a.endswith("~notes")
    assert shown_name("alice", a) == "notes" and shown_name("bob", b) == "notes"
    assert shown_name("bob", a) == a  # not his: never stripped into one of his names
    assert stored_name(LOCAL_USER, "notes") == "notes" == shown_name(LOCAL_USER, "notes")
    assert len(stored_name("x" * 10_000, "n" * 128)) == 147  # any user name: the same bounded length
    assert not given_name(a) and given_name("notes") and not given_name("a/b") and not given_name("x\x00")
    assert not given_name("n" * 129) and not given_name("-x")
    event = RunStarted("run_1", a, "task", "m")
    assert shown_event("alice", event).session == "notes" and shown_event("alice", {"type": "x"}) == {"type": "x"}


def test_a_name_resolves_among_the_callers_rows_only(tmp_path: Path, replica_db: str | None) -> None:
    q = replica(tmp_path, replica_db).queue
    q.submit("run_old", "alice", "notes", "from before", {})  # a bare row of alice's, as the old server made it
    q.submit("run_a2a", "bob", "a2a-0123", "a2a", {})
    assert q.session_of("alice", "notes") == "notes"  # hers from before, by its bare name
    assert q.session_of("bob", "notes") == stored_name("bob", "notes")  # alice's row changes nothing for bob
    assert q.session_of("bob", "a2a-0123") == "a2a-0123"
    assert q.session_of("alice", "a2a-0123") == stored_name("alice", "a2a-0123")
    assert q.session_of("carol", "fresh") == stored_name("carol", "fresh")
    assert q.session_of(LOCAL_USER, "notes") == "notes"
    job = q.submit("run_bob", "bob", q.session_of("bob", "notes"), "his", {})
    assert job.public()["session"] == "notes" and q.session_owner(stored_name("bob", "notes")) == "bob"
    assert q.session_owner("notes") == "alice"
    q.close()
