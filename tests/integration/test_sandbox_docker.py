"""The Docker sandbox against a real engine, beyond the containment suite it shares with bubblewrap
(tests/integration/test_sandbox.py): no capabilities even as root, settings files read-only, the shell
tool in Docker from the command line, an image that cannot be pulled."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shou.sandbox.docker import DEFAULT_IMAGES, DockerSandbox

from .test_sandbox import DOCKER_IMAGE as IMAGE
from .test_sandbox import containers, docker_sandbox

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def sb(workspace: Path) -> Iterator[DockerSandbox]:
    from shou.sandbox.base import Limits

    box = docker_sandbox(workspace, Limits(timeout=30))
    yield box  # type: ignore[misc]
    box.close()  # type: ignore[attr-defined]


async def test_settings_files_are_read_only(sb: DockerSandbox, workspace: Path) -> None:
    (workspace / "shou.toml").write_text("max_steps = 3\n")
    r = await sb.run(["bash", "-c", "echo 'sandbox = \"local\"' >> /workspace/shou.toml"])
    assert "Read-only file system" in r.stderr
    assert (workspace / "shou.toml").read_text() == "max_steps = 3\n"


async def test_no_capabilities_even_as_root(sb: DockerSandbox) -> None:
    r = await sb.run(["bash", "-c", "grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status; "
                                    "grep NoNewPrivs /proc/self/status; echo 1 > /proc/sys/kernel/printk"])
    caps = dict(line.split(":\t") for line in r.stdout.splitlines())
    assert caps["CapEff"] == caps["CapPrm"] == caps["CapBnd"] == "0000000000000000", r.stdout
    assert caps["NoNewPrivs"].strip() == "1"
    assert "Read-only file system" in r.stderr or "Permission denied" in r.stderr


async def test_shell_tool_runs_in_docker_when_configured(sb: DockerSandbox, serve, shou, workspace: Path) -> None:
    srv = serve([{"tool_calls": [{"name": "shell", "arguments": {"command": "cat /etc/os-release 2>&1 | head -1; "
                                                                           "echo $((6 * 7)) > answer.txt"}}]},
                 {"text": "done"}])
    r = shou("run", "compute", "--sandbox", "docker", server=srv, SHOU_SANDBOX_IMAGE=IMAGE)
    assert r.returncode == 0, r.stderr
    assert (workspace / "answer.txt").read_text() == "42\n"
    result = next(m for m in srv.requests[1]["messages"] if m["role"] == "tool")["content"]
    assert "No such file or directory" in result  # the image has no os-release: it is not the host's /etc


async def test_an_image_that_cannot_be_pulled_is_a_clear_error(sb: DockerSandbox) -> None:
    from shou.errors import UserError

    missing = DockerSandbox(sb.workspace, sb.limits, images=dict.fromkeys(DEFAULT_IMAGES, "shou-no-such:image"))
    with pytest.raises(UserError, match=r"cannot be pulled.*sandbox_image"):
        await missing.run(["true"])
    assert containers() == []
