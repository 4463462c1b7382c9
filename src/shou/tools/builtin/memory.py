"""`save_memory` and `search_memory`: the agent's long-term memory, kept across runs and sessions.

The store is `<workspace>/.shou/memory.db`, or the path in the setting `memory_store` (relative paths
are taken from the workspace); a false setting `memory_embeddings` makes it BM25 only. Stores stay
open for the life of the process, so the vectors a search needs are loaded once, not on every call.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from ...errors import ToolError
from ...workspace import state_database
from ..base import ToolContext, ToolResult, tool

if TYPE_CHECKING:  # the store is imported when a tool first runs: most runs never touch memory
    from ...memory import Memory, MemoryStore

__all__ = ["memory_store_for", "save_memory", "search_memory"]

MAX_MEMORY_CHARS = 4000
MAX_TOP_K = 50
MAX_FACTS = 20

_stores: dict[Path | str, MemoryStore] = {}
_stores_lock = threading.Lock()


def memory_store_for(ctx: ToolContext) -> MemoryStore:
    """The (shared, open) store the tools use for this context's workspace and settings: a `memory_store`
    setting starting with postgresql:// or postgres:// names a PostgreSQL database (memory/postgres.py)."""
    from ...memory.postgres import is_postgres_url

    configured = getattr(ctx.settings, "memory_store", None)
    where: Path | str
    if is_postgres_url(configured):
        where = str(configured)
    elif configured:
        path = Path(configured)
        where = (path if path.is_absolute() else ctx.workspace / path).resolve()
    else:
        where = state_database(ctx.workspace, "memory.db")
    # `memory_embeddings = False` in the settings keeps the model out (keyword search only).
    embeddings = bool(getattr(ctx.settings, "memory_embeddings", True))
    with _stores_lock:
        store = _stores.get(where)
        if store is None:
            from ...memory import MemoryStore
            from ...memory.postgres import PostgresMemoryStore

            store = _stores[where] = (PostgresMemoryStore(where, embeddings=embeddings) if isinstance(where, str)
                                      else MemoryStore(where, embeddings=embeddings,
                                                       env=getattr(ctx.settings, "env", None) or None))
        return store


def _line(m: Memory) -> str:
    when = time.strftime("%Y-%m-%d", time.localtime(m.time))
    tags = f" #{' #'.join(m.tags)}" if m.tags else ""
    return f"[{m.id}] ({when}){tags} {m.text}"


class FactIn(BaseModel):
    """A relation between two named things, e.g. Alice / works at / Quillon Labs."""

    model_config = ConfigDict(extra="forbid")

    subject: str = Field(min_length=1, max_length=200)
    relation: str = Field(min_length=1, max_length=200)
    object: str = Field(min_length=1, max_length=200)


@tool
def save_memory(
    content: str, ctx: ToolContext, tags: list[str] | None = None, facts: list[FactIn] | None = None
) -> ToolResult:
    """Remember a fact for later runs and sessions: a user preference, a decision, something learned.

    Write one self-contained fact per call (who/what/when), since it will be read without this
    conversation around it. Saving the same fact again is harmless: the copy is not stored.

    Args:
        content: The fact to remember, as a complete sentence.
        tags: Optional labels to group memories, e.g. ["preference"] or ["project-x"].
        facts: Optional relations the sentence states between named things, e.g. [{"subject": "Alice",
            "relation": "works at", "object": "Quillon Labs"}]; a later search for one finds the other.
    """
    text = content.strip()
    if not text:
        raise ToolError("content is empty; pass the fact to remember as a sentence")
    if len(text) > MAX_MEMORY_CHARS:
        raise ToolError(f"content is {len(text)} characters; keep a memory under {MAX_MEMORY_CHARS} "
                        "(split it into separate facts)")
    store = memory_store_for(ctx)
    from ...memory import Fact

    stated = [Fact(f.subject.strip(), f.relation.strip(), f.object.strip()) for f in facts or ()]
    if len(stated) > MAX_FACTS:
        raise ToolError(f"{len(stated)} facts; give at most {MAX_FACTS} per memory")
    mem, added = store.add(text, session=ctx.session, source="agent", tags=tags or (), facts=stated)
    details = {"id": mem.id, "added": added, "store": str(store.path)}
    if added:
        return ToolResult(f"Saved as memory {mem.id}.", details=details)
    return ToolResult(f"Already remembered as memory {mem.id}: {mem.text}", details=details)


@tool(idempotent=True)
def search_memory(query: str, ctx: ToolContext, top_k: int = 5, tags: list[str] | None = None) -> ToolResult:
    """Search long-term memory (facts saved in earlier runs and sessions), best matches first.

    Args:
        query: What to look for, in plain words, e.g. "user's preferred test framework".
        top_k: How many memories to return (1-50).
        tags: Only memories carrying at least one of these tags.
    """
    if not query.strip():
        raise ToolError("query is empty; describe what to look for in plain words")
    if not 1 <= top_k <= MAX_TOP_K:
        raise ToolError(f"top_k must be between 1 and {MAX_TOP_K}")
    store = memory_store_for(ctx)
    # Like recall: only what the user's own runs wrote (a workspace's memory.db may come from anyone).
    found = store.search(query, top_k, tags=tags or (), signed_only=store.SIGNED)
    store.touch([m.id for m in found])
    details = {"results": [{"id": m.id, "score": m.score, "text": m.text} for m in found], "mode": store.mode}
    if not found:
        return ToolResult("No memories match; try other words, or there is nothing saved on this yet.",
                          details=details)
    # What the model saved itself may come from what it read: outside content, as recall gives it (request.py)
    return ToolResult("\n".join(_line(m) for m in found), details=details,
                      untrusted=any(m.source == "agent" for m in found))
