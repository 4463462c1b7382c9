"""A session's delete (serve/app.py) against a run asked for on another replica while it is under way: the run is
refused, or the delete is; a run accepted (202) is never erased with the session."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from shou.serve import app
from shou.serve.jobs import Refused

from ..fixtures.replicas import call_route, two_replicas


def _delete(srv: Any, name: str) -> tuple[int, str]:
    return call_route(app.delete_session, srv, "DELETE", f"/v1/sessions/{name}", {"name": name})


def test_a_run_asked_for_while_its_session_is_being_deleted_is_refused_not_erased(
        tmp_path: Path, replica_db: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Replica A's delete found no run under way, then took the session's lock; replica B accepted a run for the
    # session in between (202), and A's delete then erased that run's row with the session's: it ran (its
    # model was called) and left no trace. Paced here at the delete's lock, where both versions pass.
    a, b = two_replicas(tmp_path, replica_db)
    asked: dict[str, Any] = {}
    real_lock = a.store.lock

    def lock_with_a_run_asked_meanwhile(name: str) -> Any:
        try:
            asked["job"] = b.queue.submit("run_meanwhile", "alice", name, "later", {})
        except Refused as e:
            asked["refused"] = e.status
        return real_lock(name)

    monkeypatch.setattr(a.store, "lock", lock_with_a_run_asked_meanwhile)
    status, text = _delete(a, "orig")
    assert status == 204, text
    if "job" in asked:  # accepted: it must still be there, and the delete must not have happened under it
        assert b.queue.get("run_meanwhile", "alice") is not None, "a run answered 202 was erased with its session"
    assert asked.get("refused") == 409, asked
    # once the session is gone, its name takes a new run
    assert b.queue.submit("run_after", "alice", "orig", "again", {}).status == "queued"


def test_a_delete_that_fails_gives_the_session_back_to_new_runs(tmp_path: Path, replica_db: str | None,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = two_replicas(tmp_path, replica_db)

    def broken(name: str) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(a.store, "delete", broken)
    with pytest.raises(OSError):
        _delete(a, "orig")
    assert b.queue.submit("run_x", "alice", "orig", "go on", {}).status == "queued"
    assert _delete(b, "orig")[0] == 409  # and a session with a run under way is not deleted


def test_a_second_delete_cannot_erase_what_another_user_made_under_the_freed_name(
        tmp_path: Path, replica_db: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two deletes of alice's "orig" (a retry, two tabs, two replicas): B's had marked the session and was about
    # to take its lock when A's ran whole; bob then took the freed name and ran there; B's delete went on and
    # erased bob's session, runs and ownership.
    import asyncio

    from shou import Agent, ScriptedModel

    a, b = two_replicas(tmp_path, replica_db)
    seen: dict[str, Any] = {}
    real_lock = b.store.lock

    def the_other_delete_and_bob(name: str) -> None:
        seen["first"] = _delete(a, name)
        if seen["first"][0] == 204:  # the name is free: bob takes it, and his run writes its log
            b.queue.submit("run_bob", "bob", name, "bob's task", {})
            asyncio.run(Agent(ScriptedModel([{"text": "bob's"}]), [], workspace=tmp_path,
                              store=a.store).arun("bob's task", name))

    def lock_after_the_other_delete_and_bob(name: str) -> Any:
        meanwhile = threading.Thread(target=the_other_delete_and_bob, args=(name,))  # no event loop of B's
        meanwhile.start()
        meanwhile.join(60)
        return real_lock(name)

    monkeypatch.setattr(b.store, "lock", lock_after_the_other_delete_and_bob)
    monkeypatch.setattr(a.store, "lock", real_lock)
    second = _delete(b, "orig")
    assert b.queue.session_owner("orig") in (None, "bob")
    if seen["first"][0] == 204:
        assert b.queue.session_owner("orig") == "bob" and b.store.exists("orig"), (seen, second)
        assert b.queue.get("run_bob", "bob") is not None, "bob's run was erased by alice's delete"
    else:
        assert seen["first"][0] == 409 and "being deleted" in seen["first"][1], seen
        assert second[0] == 204 and not b.store.exists("orig")


def test_a_delete_while_a_fork_into_the_session_is_landing_is_refused(tmp_path: Path, replica_db: str | None) -> None:
    # A fork into "x" had taken the name (not yet copied); a delete of "x" forgot the name; the fork then landed,
    # answered 201, and its history was nobody's: another user could take the name and read it.
    a, b = two_replicas(tmp_path, replica_db)
    assert a.queue.adopt_session("x", "alice")  # the fork's first step, on replica A
    status, text = _delete(b, "x")
    assert status == 409 and "fork" in text, (status, text)
    a.queue.end_fork("x")  # the fork is over
    assert b.queue.session_owner("x") == "alice"
