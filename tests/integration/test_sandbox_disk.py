"""Issue 28, item 2: the disk allowance is the run's, across all its sandboxed calls, on both backends.

Three shell calls of ~850 MB each used to complete in one run (the allowance was per call), and Docker had
none. Here the allowance is set small (settings or limits) and each call writes a share of it, in a
workspace on a file system of its own (the allowance watches the whole file system).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shou.sandbox.base import Limits

from .conftest import tool_messages
from .test_sandbox import DOCKER_IMAGE
from .test_sandbox_privileges import BACKENDS, make, own_file_system, release

ALLOWANCE_MB = 40
# 30 MB a call: one call fits (other writers on the machine may add a little), two do not.
WRITE = "dd if=/dev/zero of=big{n} bs=1M count=30 status=none && echo wrote {n}"


@pytest.fixture
def workspace(workspace: Path) -> Iterator[Path]:
    with own_file_system(workspace):
        yield workspace


@pytest.mark.parametrize("backend", BACKENDS)
async def test_calls_of_one_sandbox_share_the_allowance(backend: str, workspace: Path) -> None:
    box = make(backend, workspace, Limits(timeout=60, disk_mb=ALLOWANCE_MB))
    try:
        results = [await box.run(["bash", "-c", WRITE.format(n=n)]) for n in (1, 2, 3)]
    finally:
        release(box)
    first, second, third = results
    assert first.ok and first.stdout == "wrote 1\n", first.for_model()
    # The watcher samples: a write this fast may finish before it looks, and is still reported and counted.
    assert second.reason == "disk", second.for_model()
    assert f"{ALLOWANCE_MB} MB disk allowance" in second.note and "earlier calls" in second.note
    assert third.reason == "disk" and "was not run" in third.note and third.exit_code is None, third.for_model()
    assert "disk allowance" in third.for_model()
    assert not (workspace / "big3").exists()
    written = sum(p.stat().st_size for p in workspace.glob("big*"))
    assert written <= 2 * 30 * 2**20  # 90 MB asked for; the third call never ran


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_agent_run_has_one_allowance_across_its_shell_calls(backend: str, serve, shou, workspace: Path) -> None:
    if backend == "docker":
        make(backend, workspace, Limits())  # skips (or fails under CI) without an engine and the image
    turns = [{"tool_calls": [{"name": "shell", "arguments": {"command": WRITE.format(n=n)}}]} for n in (1, 2, 3)]
    srv = serve([*turns, {"text": "done"}, {"tool_calls": [{"name": "shell", "arguments": {"command": "echo again"}}]},
                 {"text": "done again"}])
    env = {"SHOU_SANDBOX_DISK_MB": str(ALLOWANCE_MB), "SHOU_SANDBOX_IMAGE": DOCKER_IMAGE}
    r = shou("run", "fill the disk", "--sandbox", backend, server=srv, **env)
    assert r.returncode == 0, r.stderr
    results = [m["content"] for m in tool_messages(srv.requests[3])]
    assert len(results) == 3
    assert "wrote 1" in results[0] and "exit code 0" in results[0]
    assert "stopped: it wrote too much to the disk" in results[1], results[1]
    assert f"{ALLOWANCE_MB} MB disk allowance" in results[1]
    assert "was not run" in results[2], results[2]
    assert not (workspace / "big3").exists()
    # The next run has an allowance of its own (it is not the workspace's, used up for good).
    r = shou("run", "again", "--sandbox", backend, server=srv, **env)
    assert r.returncode == 0, r.stderr
    assert "again" in tool_messages(srv.requests[-1])[-1]["content"]
