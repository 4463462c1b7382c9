"""all-MiniLM-L6-v2 in numpy (`shou.memory.minilm`) against vectors sentence-transformers computed.

The reference vectors come from `tests/data/make_minilm_reference.py`; these tests need no torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from shou.memory import MiniLMEmbedder, memory_status

from ..fixtures.needs import need

need(*memory_status())

import numpy as np  # noqa: E402  (only importable with the memory extra, which need() just checked)

from shou.memory.minilm import load_minilm  # noqa: E402

REFERENCE = json.loads((Path(__file__).parents[1] / "data" / "minilm_reference.json").read_text(encoding="utf-8"))
SENTENCES: list[str] = REFERENCE["sentences"]
EXPECTED = np.asarray(REFERENCE["vectors"], dtype=np.float32)
EMBEDDER = MiniLMEmbedder()


def test_matches_sentence_transformers() -> None:
    got = EMBEDDER.encode(SENTENCES)
    assert got.dtype == np.float32 and got.shape == (len(SENTENCES), 384)
    expected = EXPECTED / np.linalg.norm(EXPECTED, axis=1, keepdims=True)  # undo the 6-decimal rounding's drift
    cosines = (got * expected).sum(axis=1)
    worst = int(cosines.argmin())
    assert cosines[worst] >= 0.999, f"cosine {cosines[worst]:.6f} for {SENTENCES[worst]!r}"


def test_long_text_is_truncated_like_sentence_transformers() -> None:
    long = max(SENTENCES, key=len)
    model = load_minilm()
    assert len(model.tokenize([long])[0]) == REFERENCE["max_seq_length"] == model.max_seq_length
    # Words past the cut-off change nothing.
    a, b = EMBEDDER.encode([long, long + " And then the ship sank without a trace."])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_batching_and_order_do_not_change_vectors() -> None:
    together = EMBEDDER.encode(SENTENCES)
    one_by_one = np.concatenate([EMBEDDER.encode([s]) for s in SENTENCES])
    shuffled = np.random.default_rng(0).permutation(len(SENTENCES))
    reordered = EMBEDDER.encode([SENTENCES[i] for i in shuffled])
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)
    np.testing.assert_allclose(together[shuffled], reordered, atol=1e-5)


def test_rows_are_unit_length() -> None:
    norms = np.linalg.norm(EMBEDDER.encode([*SENTENCES, "a", "a" * 2000]), axis=1)
    np.testing.assert_allclose(norms, 1.0, atol=1e-5)


def test_empty_input_and_empty_string() -> None:
    empty = MiniLMEmbedder().encode([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32
    # "" is embedded from [CLS] [SEP] alone, as sentence-transformers does, not refused or zeroed.
    (vector,) = EMBEDDER.encode([""])
    assert float(vector @ EXPECTED[SENTENCES.index("")]) >= 0.999


def test_no_torch_at_import_or_after_encoding() -> None:
    code = (
        "import sys, shou.memory\n"
        "heavy = lambda: sorted({'torch', 'sentence_transformers', 'transformers'} & set(sys.modules))\n"
        "e = shou.memory.MiniLMEmbedder()\n"
        "print(heavy(), 'numpy' in sys.modules)\n"
        "e.encode(['does this load torch?'])\n"
        "print(heavy())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["[] False", "[]"]
