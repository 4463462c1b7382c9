"""Build shou's token-encoding files (src/shou/context/encodings/NAME.ranks.gz) from tiktoken's originals.

    python scripts/make_encodings.py PATH/cl100k_base.tiktoken PATH/o200k_base.tiktoken

An original is one "base64(token) rank" line per token and takes ~70 ms to parse. The files shou ships
hold the same tokens in rank order as a `marshal`ed list of bytes (the format of the bytes constants in every
.pyc, read by C in one call: ~4 ms for cl100k's 100,256 tokens, where slicing them out of a lengths-then-bytes
blob in Python took ~20 ms), gzipped.
The original must match tiktoken's published SHA-256; the new file's own SHA-256 is printed for
`_ENCODINGS` in shou/context/tokens.py.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import marshal
import sys
from pathlib import Path

UPSTREAM_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
OUT = Path(__file__).resolve().parents[1] / "src" / "shou" / "context" / "encodings"


def main() -> None:
    for arg in sys.argv[1:]:
        path = Path(arg)
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        name = path.name.split(".")[0]
        if hashlib.sha256(raw).hexdigest() != UPSTREAM_SHA256[name]:
            sys.exit(f"{path} is not tiktoken's {name} (SHA-256 differs)")
        pairs = [line.split() for line in raw.splitlines() if line]
        tokens = [base64.b64decode(t) for t, _ in pairs]
        if [int(r) for _, r in pairs] != list(range(len(pairs))):
            sys.exit(f"{name}: ranks are not 0..N-1; the format needs them to be")
        blob = marshal.dumps(tokens, 4)  # version 4: what Python 3.4 and later all read
        (OUT / f"{name}.ranks.gz").write_bytes(gzip.compress(blob, 9, mtime=0))
        print(name, len(tokens), hashlib.sha256(blob).hexdigest())


if __name__ == "__main__":
    main()
