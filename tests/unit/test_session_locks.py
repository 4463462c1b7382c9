"""Session locks in one process (store/locks.py): two threads taking the same session, one of them wins."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from shou.store.locks import LockFile, SessionBusy


def test_two_threads_taking_one_session_at_once_do_not_both_get_it(tmp_path: Path) -> None:
    # Both hold the one open file description, so the kernel lets both lock the byte: only `held` tells them
    # apart, and its check must not be passed by both before either records its take (the fcntl drops the GIL).
    locks = LockFile(tmp_path / "s.db.locks")
    fcntl_ = locks._fcntl

    def slow(op: int, kind: int, offset: int) -> None:
        time.sleep(0.05)  # a widened window; any thread switch inside the syscall does the same
        fcntl_(op, kind, offset)

    locks._fcntl = slow  # type: ignore[method-assign]
    got: list[object] = []

    def take() -> None:
        try:
            got.append(locks.take("s"))
        except SessionBusy:
            got.append("busy")

    threads = [threading.Thread(target=take) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(map(str, (g == "busy" for g in got))) == ["False", "True"], got
