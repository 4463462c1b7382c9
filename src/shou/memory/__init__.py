"""Long-term memory: a SQLite store searched by BM25 and, with the `memory` extra, sentence embeddings.

```python
from shou.memory import MemoryStore, recall

with MemoryStore.for_workspace(".") as store:
    store.add("The user prefers tabs over spaces", tags=["preference"])
    for memory in recall(store, "how should I indent?", k=3):
        print(memory.score, memory.text)
```
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .embeddings import MODEL_NAME, Embedder, MiniLMEmbedder, default_embedder, memory_status
    from .entities import Fact
    from .graph import EntityView, Link
    from .ranking import RankParams
    from .records import Memory, NewMemory
    from .store import MemoryStore, recall

__all__ = [
    "MODEL_NAME", "Embedder", "EntityView", "Fact", "Link", "Memory", "MemoryStore", "MiniLMEmbedder", "NewMemory",
    "RankParams", "default_embedder", "memory_status", "recall",
]
# Where each name lives, imported when first used: every run asks `embeddings` whether the model is installed,
# and importing the store, the ranking and the entity extraction with it was ~60 ms of a `shou run`'s start-up.
_HOMES = {
    "MODEL_NAME": "embeddings", "Embedder": "embeddings", "MiniLMEmbedder": "embeddings",
    "default_embedder": "embeddings", "memory_status": "embeddings", "Fact": "entities", "EntityView": "graph",
    "Link": "graph", "RankParams": "ranking", "Memory": "records", "NewMemory": "records",
    "MemoryStore": "store", "recall": "store",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
