"""The shipped encoding files hold exactly tiktoken's published encodings, and a damaged one is refused."""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.util
from pathlib import Path

import pytest

from shou.context import tokens

ROOT = Path(__file__).resolve().parents[2]


def _upstream_sha256() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("make_encodings", ROOT / "scripts" / "make_encodings.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.UPSTREAM_SHA256


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_the_loaded_ranks_are_tiktokens_published_file(name: str) -> None:
    ranks = tokens.load_encoding(name)._mergeable_ranks
    assert sorted(ranks.values()) == list(range(len(ranks)))
    # tiktoken's original: one "base64(token) rank" line per token, in rank order.
    original = b"".join(base64.b64encode(token) + b" %d\n" % rank
                        for token, rank in sorted(ranks.items(), key=lambda item: item[1]))
    assert hashlib.sha256(original).hexdigest() == _upstream_sha256()[name]


def test_a_damaged_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = Path(tokens.__file__).parent / "encodings" / "cl100k_base.ranks.gz"
    blob = bytearray(gzip.decompress(shipped.read_bytes()))
    blob[-1] ^= 1  # one bit of the last token
    (tmp_path / "encodings").mkdir()
    (tmp_path / "encodings" / "cl100k_base.ranks.gz").write_bytes(gzip.compress(bytes(blob)))
    monkeypatch.setattr(tokens, "__file__", str(tmp_path / "tokens.py"))
    with pytest.raises(ValueError, match="damaged"):
        tokens.load_encoding("cl100k_base")
