"""The fork route (serve/fork_api.py) across replicas: each replica's own store and queue connections on one
database, the route called as Starlette would. A fork that fails lets go only of a name it took, and never of
one a session now holds (another replica's fork of the same caller's), nor of one another fork is landing under."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from shou.serve import fork_api
from shou.serve.names import stored_name

from ..fixtures.replicas import call_route, two_replicas


def _fork(srv: Any, source: str, name: str, at: int | None = None) -> tuple[int, str]:
    body = {"name": name} if at is None else {"name": name, "at": at}
    return call_route(fork_api.fork_session_route, srv, "POST", f"/v1/sessions/{source}/fork", {"name": source},
                      body)


def test_two_replicas_forking_into_one_new_name_leave_the_landed_fork_its_callers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Replica A takes the new name "x" (took=True) and is slower to copy the log; replica B, asked the same fork
    # by the same user, finds "x" hers with no log and no run, forks, and answers 201. A's copy then fails
    # (SessionExists: B's landed), and since A took the name it forgets it: B's 201 fork is nobody's (404).
    a, b = two_replicas(tmp_path)

    real = fork_api.fork_session
    a_took, b_done = threading.Event(), threading.Event()

    def paced(store: Any, *args: Any) -> Any:
        if store is a.store:  # replica A: between taking the name and copying the log
            a_took.set()
            assert b_done.wait(30), "replica B's fork never answered"
        return real(store, *args)

    monkeypatch.setattr(fork_api, "fork_session", paced)
    answers: dict[str, tuple[int, str]] = {}
    first = threading.Thread(target=lambda: answers.__setitem__("a", _fork(a, "orig", "x")))
    first.start()
    assert a_took.wait(30)
    answers["b"] = _fork(b, "orig", "x")
    b_done.set()
    first.join(30)
    assert answers["b"][0] == 201, answers
    assert b.store.exists(stored_name("alice", "x"))
    assert b.queue.session_owner(stored_name("alice", "x")) == "alice", (
        f"the fork answered 201 to alice is nobody's after the other replica's fork failed: {answers}")


def test_a_failed_fork_does_not_let_go_of_a_name_another_fork_is_landing_under(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Replica A takes the new name "y" for alice; replica B, asked a fork into "y" by alice too, finds it hers
    # with neither a log nor a run and forks. A's fork fails (a step that does not exist) while B's is still
    # copying: A looked for a session under "y", found none yet, and let go of the name; B's fork then landed,
    # answered 201, and was nobody's (404 to alice).
    a, b = two_replicas(tmp_path)

    real = fork_api.fork_session
    a_took, b_forking, a_done = threading.Event(), threading.Event(), threading.Event()

    def paced(store: Any, *args: Any) -> Any:
        if store is a.store:  # A: holds "y", and fails only once B's fork is under way
            a_took.set()
            assert b_forking.wait(30), "replica B's fork never began"
        else:  # B: its copy lands only after A has failed and answered
            b_forking.set()
            assert a_done.wait(30), "replica A's fork never answered"
        return real(store, *args)

    monkeypatch.setattr(fork_api, "fork_session", paced)
    answers: dict[str, tuple[int, str]] = {}
    first = threading.Thread(target=lambda: answers.__setitem__("a", _fork(a, "orig", "y", at=99)))
    second = threading.Thread(target=lambda: answers.__setitem__("b", _fork(b, "orig", "y")))
    first.start()
    assert a_took.wait(30)
    second.start()
    first.join(30)
    a_done.set()
    second.join(30)
    assert answers["a"][0] == 400 and answers["b"][0] == 201, answers
    assert b.store.exists(stored_name("alice", "y"))
    assert b.queue.session_owner(stored_name("alice", "y")) == "alice", (
        f"the fork answered 201 to alice is nobody's: the other replica's failed fork let go of its name: {answers}")
    # and once every fork into it is over, a failed one lets go of a name it took
    assert _fork(a, "orig", "z", at=99)[0] == 400 and a.queue.session_owner(stored_name("alice", "z")) is None
