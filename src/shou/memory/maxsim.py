"""MaxSim token vectors for late interaction: how a memory's word pieces are stored and matched against a query's.

Each memory keeps the unit-length output vectors of its content word pieces, quantised to int8 with one
float32 scale per piece (388 bytes a piece instead of 1,536; cosines move by under 0.01). A match score
is, for each query piece, the best cosine with any piece of the memory, averaged over the query's pieces
(ColBERT's MaxSim, normalised by query length).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    F32 = npt.NDArray[np.float32]

__all__ = ["match", "pack", "unpack"]


def pack(vectors: F32) -> bytes:
    """A (pieces, dim) matrix as bytes: the per-piece scales (float32), then the int8 values."""
    import numpy as np

    if len(vectors) == 0:
        return b""
    scale = np.maximum(np.abs(vectors).max(axis=1), np.float32(1e-12)) / np.float32(127)
    values = np.rint(vectors / scale[:, None]).astype(np.int8)
    return scale.astype(np.float32).tobytes() + values.tobytes()


def unpack(blob: bytes, dim: int) -> F32:
    """The matrix `pack` stored (a (0, dim) matrix for an empty blob)."""
    import numpy as np

    n, rest = divmod(len(blob), 4 + dim)
    if rest:
        raise ValueError(f"a token blob of {len(blob)} bytes does not hold {dim}-dimensional pieces")
    scale = np.frombuffer(blob, dtype=np.float32, count=n)
    values = np.frombuffer(blob, dtype=np.int8, offset=4 * n).reshape(n, dim)
    return values.astype(np.float32) * scale[:, None]


def match(query: F32, blobs: Sequence[bytes], dim: int) -> list[float]:
    """The MaxSim score of each memory (its packed pieces in `blobs`) for the query's pieces; 0 for a
    memory or a query without pieces. One matrix product over all memories' pieces together."""
    import numpy as np

    scores = [0.0] * len(blobs)
    if len(query) == 0:
        return scores
    kept = [(i, unpack(b, dim)) for i, b in enumerate(blobs) if b]
    kept = [(i, m) for i, m in kept if len(m)]
    if not kept:
        return scores
    pieces = np.concatenate([m for _, m in kept])
    starts = np.cumsum([0] + [len(m) for _, m in kept[:-1]])
    best = np.maximum.reduceat(query @ pieces.T, starts, axis=1)  # (query pieces, memories)
    for (i, _), value in zip(kept, best.mean(axis=0), strict=True):
        scores[i] = float(value)
    return scores
