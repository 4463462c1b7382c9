"""The Docker sandbox's calls to the engine, each one safe to cancel: create (removing what a cancelled
create made), wait (killing at the limits), read the logs with bounded memory, remove whatever the state."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from ..errors import UserError
from .base import ExitReason, Limits, OutputCapture
from .quota import DiskWatch

KILL_GRACE = 10.0  # seconds to let a killed container be reported as exited
WAIT_SLACK = 30.0  # the SDK's own wait timeout, past ours, so a silent engine cannot hold a thread forever


async def wait(container: Any, limits: Limits, disk: DiskWatch) -> tuple[int | None, ExitReason]:
    """Wait for the container to exit; kill it at the time limit or once it writes past the disk allowance."""
    waiter = asyncio.ensure_future(asyncio.to_thread(container.wait, timeout=limits.timeout + WAIT_SLACK))
    waiter.add_done_callback(retrieve)
    over = asyncio.Event()
    guard = asyncio.ensure_future(disk.guard(over.set))
    stopper = asyncio.ensure_future(over.wait())
    try:  # asyncio.wait never cancels the waiter
        await asyncio.wait({waiter, stopper}, timeout=limits.timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        guard.cancel()
        stopper.cancel()
    if waiter.done():
        # Writes made since the last sample count too, as in the bubblewrap sandbox.
        return int(waiter.result()["StatusCode"]), "disk" if disk.check() else "exit"
    with contextlib.suppress(Exception):  # it may have exited just now
        await asyncio.to_thread(container.kill)
    await asyncio.wait({waiter}, timeout=KILL_GRACE)  # logs are complete once it has stopped
    return None, "disk" if over.is_set() else "timeout"


async def create(client: Any, config: dict[str, Any]) -> Any:
    """Create the container; if this is cancelled, remove the container once the engine has made it."""
    task = asyncio.ensure_future(asyncio.to_thread(_create_sync, client, config))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(_discard_when_created)
        raise


def _create_sync(client: Any, config: dict[str, Any]) -> Any:
    try:
        return client.containers.create(**config)
    except Exception as exc:
        # 404 is the SDK's ImageNotFound: pull once and try again. (Checked by status so fakes need no SDK.)
        if getattr(exc, "status_code", None) != 404:
            raise
    try:
        client.images.pull(config["image"])
    except Exception as exc:  # no registry (offline, a private network): say what to do, not the engine's 500
        first = str(exc).splitlines()[0][:300]
        raise UserError(f"the Docker image {config['image']!r} is not on this engine and cannot be pulled ({first}); "
                        "pull or build it, or set sandbox_image to an image the engine has") from None
    return client.containers.create(**config)


async def start(container: Any) -> None:
    """Start the container; the engine's refusal (a bind whose destination the program turned into a
    dangling link meanwhile, say) is a `UserError` saying so, not the SDK's exception."""
    try:
        await asyncio.to_thread(container.start)
    except Exception as exc:
        if getattr(exc, "status_code", None) is None:
            raise
        first = str(exc).splitlines()[0][-400:]
        raise UserError(f"the Docker engine could not start the container ({first}). If the program is changing "
                        "shou.toml, .env or .git meanwhile (a parallel call), let it finish first") from None


def _discard_when_created(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is None:
        threading.Thread(target=discard, args=(task.result(),), daemon=True).start()


def discard(container: Any) -> None:
    """Remove a container whatever its state; force kills it first if it still runs. Errors are ignored:
    it may be gone already, and cleanup must not hide the run's own result or exception."""
    with contextlib.suppress(Exception):
        container.remove(force=True, v=True)


def read_logs(container: Any, out: OutputCapture, err: OutputCapture) -> None:
    """Stream each log into its capture chunk by chunk, so memory stays bounded however much was printed."""
    for capture, is_stdout in ((out, True), (err, False)):
        for chunk in container.logs(stdout=is_stdout, stderr=not is_stdout, stream=True, follow=False):
            capture.feed(chunk)


def retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a background future's exception as seen (a waiter left behind by a cancelled run)."""
    if not future.cancelled():
        future.exception()
