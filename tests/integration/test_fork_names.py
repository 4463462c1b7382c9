"""Forking into a name under `shou serve`: a name the caller holds with neither a log nor a run (what a fork the
store failed under leaves) may be forked into again, but a name with a queued run is that run's session (409),
and a fork that fails lets go only of what it took itself (an earlier fork may still be landing under it)."""

from __future__ import annotations

import time
from pathlib import Path

from ..fixtures.serving import serving, stream_run
from .conftest import shou_env


def _wait_status(client, run_id: str, want: str, bound: float = 30.0) -> dict:
    deadline = time.monotonic() + bound
    while True:
        got = client.get(f"/v1/runs/{run_id}").json()
        if got.get("status") == want or time.monotonic() > deadline:
            return got
        time.sleep(0.02)  # the run's status, polled: the API has no event for it


def test_a_name_with_a_queued_run_is_that_run_s_and_a_failed_fork_into_it_drops_nothing(
        serve, tmp_path: Path, workspace: Path) -> None:
    # Alice's run on the new session "x" is queued (the one slot is taken by a run whose model hangs), so "x" is
    # hers with no log yet. A fork into it would write orig's history under that run (409, as before names a
    # caller holds could be forked into again), and a fork that fails as the caller's mistake (a step that does
    # not exist) must not take her queued run with it (forget_session deleted the run's row and the name's owner).
    alice = "alice-token-0123456789"
    (tmp_path / "tokens").write_text(f"{alice} alice\n")
    (tmp_path / "tokens").chmod(0o600)
    srv = serve([{"text": "orig done"}, {"hang": True}, {"text": "x done"}])
    with serving(workspace, shou_env(tmp_path, srv), "--tokens", str(tmp_path / "tokens"),
                 "--max-concurrent", "1") as s, s.client(alice) as a:
        run = a.post("/v1/runs", json={"task": "first", "session": "orig"}).json()
        assert stream_run(a, run["run_id"])[-1]["data"]["status"] == "completed"
        blocker = a.post("/v1/runs", json={"task": "hang", "session": "blocker"}).json()
        assert _wait_status(a, blocker["run_id"], "running")["status"] == "running"
        queued = a.post("/v1/runs", json={"task": "later", "session": "x"})
        assert queued.status_code == 202 and queued.json()["status"] == "queued", queued.text
        queued = queued.json()
        r = a.post("/v1/sessions/orig/fork", json={"name": "x"})
        assert r.status_code == 409, f"a fork was written into a session with a queued run: {r.status_code} {r.text}"
        r = a.post("/v1/sessions/orig/fork", json={"at": 9, "name": "x"})
        assert r.status_code in (400, 409), r.text
        after = a.get(f"/v1/runs/{queued['run_id']}")
        assert after.status_code == 200, f"the queued run is gone after a failed fork into its name: {after.text}"
        assert a.get("/v1/sessions/x").status_code == 200
