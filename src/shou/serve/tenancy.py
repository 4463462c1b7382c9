"""What keeps one API user's runs apart from another's beyond sessions: long-term memory and limits.

Each user with a token gets a memory of their own: on SQLite a file under `.shou/users/`, on PostgreSQL a
schema of their own in the same database (`shou_u_<hash>`), so one user's `save_memory` is never found by
another's `search_memory` or recalled into their context. The person at the machine (`local`, no tokens)
keeps the workspace's memory, shared with `shou run`. The workspace's files are shared by every user: the
server works on one project; users who must not see each other's files need servers of their own.

Limits a request may set (`max_steps`, `token_budget`, `max_cost`) only tighten the operator's.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from ..agent.config import AgentConfig, narrow
from .auth import LOCAL_USER
from .names import user_key

REQUEST_LIMITS = ("max_steps", "token_budget", "max_cost")  # what a request may set (only lower)


def with_search_path(url: str, schema: str) -> str:
    """`url` whose connections use `schema` alone."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "options"]
    query.append(("options", f"-c search_path={schema}"))
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))  # libpq reads no '+'


def is_postgres(where: Any) -> bool:
    return isinstance(where, str) and where.startswith(("postgresql://", "postgres://"))


class UserMemory:
    """Gives each run's agent its user's memory (settings `memory_store` and the recall store)."""

    def __init__(self, settings: Any, store: Any) -> None:
        self.settings = settings
        configured = getattr(settings, "memory_store", None)
        self.url = configured if is_postgres(configured) else getattr(store, "url", None)
        self.workspace = Path(settings.workspace)
        self._lock = threading.Lock()
        self._stores: dict[str, Any] = {}

    def fields(self, user: str) -> dict[str, Any]:
        """The config fields that point a run at `user`'s memory (none for the person at the machine)."""
        if user == LOCAL_USER:
            return {}
        key = user_key(user)
        if self.url:
            where = with_search_path(self.url, f"shou_u_{key}")
            return {"settings": dataclasses.replace(self.settings, memory_store=where),
                    "memory": self._postgres(where, key)}
        path = self.workspace / ".shou" / "users" / key / "memory.db"
        # Recall needs a file to read: none until the user's first save_memory makes one.
        return {"settings": dataclasses.replace(self.settings, memory_store=str(path)),
                "memory": self._sqlite(path) if path.exists() else None}

    def _postgres(self, where: str, key: str) -> Any:
        with self._lock:
            store = self._stores.get(where)
            if store is None:
                from ..memory.postgres import PostgresMemoryStore
                from ..store.pg_link import connect

                conn = connect(self.url)  # the schema first: the store's migrations create its tables in it
                try:
                    with conn.transaction():  # IF NOT EXISTS still races when two replicas run it together
                        conn.execute("SELECT pg_advisory_xact_lock(%s)", (0x5340_0003,))
                        conn.execute(f"CREATE SCHEMA IF NOT EXISTS shou_u_{key}")
                finally:
                    conn.close()
                store = self._stores[where] = PostgresMemoryStore(
                    where, embeddings=bool(getattr(self.settings, "memory_embeddings", True)))
            return store

    def _sqlite(self, path: Path) -> Any:
        with self._lock:
            store = self._stores.get(str(path))
            if store is None:
                from ..memory import MemoryStore

                store = self._stores[str(path)] = MemoryStore(
                    path, embeddings=bool(getattr(self.settings, "memory_embeddings", True)))
            return store


def tightened(config: AgentConfig, options: dict[str, Any]) -> AgentConfig:
    """`config` with the limits a request asks for, never looser than the operator's."""
    return narrow(config, **{name: options.get(name) for name in REQUEST_LIMITS})
