"""A session's delete (serve/app.py) against a run asked for on another replica while it is under way: the run is
refused, or the delete is; a run accepted (202) is never erased with the session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shou.serve import app
from shou.serve.jobs import Refused

from ..fixtures.replicas import call_route, two_replicas


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """Where the replicas' database is: a SQLite file, or a PostgreSQL cluster of the test's own."""
    if request.param == "sqlite":
        yield None
        return
    from ..fixtures.postgres import start_postgres

    server = start_postgres()
    try:
        yield server.database("replicas")
    finally:
        server.stop()


def _delete(srv: Any, name: str) -> tuple[int, str]:
    return call_route(app.delete_session, srv, "DELETE", f"/v1/sessions/{name}", {"name": name})


def test_a_run_asked_for_while_its_session_is_being_deleted_is_refused_not_erased(
        tmp_path: Path, url: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Replica A's delete found no run under way, then took the session's lock; replica B accepted a run for the
    # session in between (202), and A's delete then erased that run's row with the session's: it ran (its
    # model was called) and left no trace. Paced here at the delete's lock, where both versions pass.
    a, b = two_replicas(tmp_path, url)
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


def test_a_delete_that_fails_gives_the_session_back_to_new_runs(tmp_path: Path, url: str | None,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = two_replicas(tmp_path, url)

    def broken(name: str) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(a.store, "delete", broken)
    with pytest.raises(OSError):
        _delete(a, "orig")
    assert b.queue.submit("run_x", "alice", "orig", "go on", {}).status == "queued"
    assert _delete(b, "orig")[0] == 409  # and a session with a run under way is not deleted
