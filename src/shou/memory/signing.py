"""Which workspace memories the user's own runs wrote: an HMAC with a key in the user's config folder.

`.shou/memory.db` lives in the workspace, so a cloned repository can ship one, and whatever it holds would
be recalled into the system prompt at the start of every run. Each memory shou stores is signed with the
user's `memory.key` (made on first use, readable by them only, never in the workspace), bound to the
store's absolute path, its id and its text; recall takes only memories whose signature verifies, so a
planted file, a row written with sqlite3, or a copy of another workspace's store recalls nothing.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .records import Memory
    from .store import MemoryStore

__all__ = ["memory_key", "sign_memories", "signature", "unsigned", "verified_rows"]

KEY_FILE = "memory.key"


def memory_key(env: Mapping[str, str] | None = None) -> bytes:
    """The user's memory key (made on first use, mode 0600)."""
    from ..keys import user_key

    return user_key(KEY_FILE, env)


def signature(key: bytes, store: Path, mem_id: str, text: str) -> str:
    """The signature of one memory of the store at `store` (an absolute path)."""
    payload = "\x1f".join((str(store), mem_id, text)).encode("utf-8", "surrogatepass")
    return hmac.new(key, payload, hashlib.sha256).hexdigest()


def verified_rows(store: MemoryStore) -> set[int]:
    """The rows of `store` whose signature verifies (cached until the file changes)."""
    with store._lock:
        version = (store._db.execute("PRAGMA data_version").fetchone()[0], store._writes)
        if store._signed is not None and store._signed[0] == version:
            return store._signed[1]
        key, where = memory_key(store._env), store.path.resolve()
        rows = {row for row, mem_id, text, sig in store._db.execute("SELECT row, id, text, sig FROM memories")
                if isinstance(sig, str) and isinstance(mem_id, str) and isinstance(text, str)
                and hmac.compare_digest(signature(key, where, mem_id, text), sig)}
        store._signed = (version, rows)
        return rows


def unsigned(store: MemoryStore) -> list[Memory]:
    """The memories of `store` no run of this user wrote there (planted, copied, or older than signatures)."""
    from .records import from_row
    from .schema import COLUMNS

    signed = verified_rows(store)
    with store._lock:
        found = store._db.execute(f"SELECT {COLUMNS} FROM memories ORDER BY row").fetchall()
    return [from_row(r) for r in found if r[0] not in signed]


def sign_memories(store: MemoryStore, ids: Sequence[str]) -> int:
    """Sign the memories `ids` of `store` as the user's own (after a person read them); how many."""
    key, where = memory_key(store._env), store.path.resolve()
    with store._transaction():
        marks = ",".join("?" * len(ids))
        rows = [(signature(key, where, i, t), i)
                for i, t in store._db.execute(f"SELECT id, text FROM memories WHERE id IN ({marks})", list(ids))]
        store._db.executemany("UPDATE memories SET sig = ? WHERE id = ?", rows)
    return len(rows)
