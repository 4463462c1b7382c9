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
