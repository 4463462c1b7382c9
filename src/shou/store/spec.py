"""A store from its spec, as `--store` gives it: `postgresql://...`, `sqlite:///PATH` or a file path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UserError

__all__ = ["open_store"]


def open_store(spec: str | None, workspace: Path, retention_days: float | None) -> Any:
    """The event store `spec` names: `postgresql://...`, a SQLite file path (relative to `workspace`; or
    `sqlite:///PATH`), or the workspace's `.shou/serve.db` when None."""
    from .sqlite import SQLiteStore

    if not spec:  # its own file: `shou run -c` and `shou sessions` never reach the API users' sessions
        from ..workspace import state_database

        return SQLiteStore(state_database(workspace, "serve.db"), retention_days)
    if spec.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresStore

        return PostgresStore(spec, retention_days)
    if "://" in spec and not spec.startswith("sqlite://"):
        raise UserError(f"--store must be postgresql://..., sqlite:///PATH or a file path, not {spec.split('://')[0]}://")
    path = Path(spec.removeprefix("sqlite://")).expanduser()
    return SQLiteStore(path if path.is_absolute() else workspace / path, retention_days)
