"""The draft-side options mtp_speedup.py measures with `--options`, on the best and the realistic heads.

Each is a spec change that leaves the main model as it is (docs/spec.md, "Cheaper drafts"):

- `vocab 4096`: `mtp.draft_vocabulary: {size: 4096}`, the tokenizer's ranking (an eighth of the 32k vocabulary);
- `int8 draft LM head` / `int4 draft LM head`: the head's own LM head (`mtp.lm_head: own`) quantized apart
  from the main model's (float32 packages only: an int4 package's head is int4 already);
- `draft side int8` / `draft side int4`: every weight only the head reads, its own LM head included,
  int8 or int4 (`quantization.overrides` on `mtp.*`: draft-side precision), float32 packages;
- `vocab 4096, draft side int4`: both;
- on int4 packages, `draft side int8` / `draft side float`: the other direction, an int4 main model
  drafting with an int8 or float head.

The main model, and so the tokens, stay the same; what moves is the head's cost and its acceptance.
"""

from __future__ import annotations

VOCABULARY = "draft_vocabulary: {size: 4096}"
OWN = "lm_head: own"
HEAD_INT4 = ("{match: 'mtp.*', bits: 4, block_size: 32}",)
HEAD_INT8 = ("{match: 'mtp.*', bits: 8, block_size: 32}",)
HEAD_FLOAT = ("{match: 'mtp.*', bits: null}",)


def option_variants(variant) -> list:
    """Variant(label, head, precision, mtp, overrides) for each option, head and precision it applies to."""
    options = {
        "fp32": [
            ("vocab 4096", VOCABULARY, ()),
            ("int8 draft LM head", OWN, ("{match: mtp.lm_head.weight, bits: 8, block_size: 32}",)),
            ("int4 draft LM head", OWN, ("{match: mtp.lm_head.weight, bits: 4, block_size: 32}",)),
            ("draft side int8", OWN, HEAD_INT8),
            ("draft side int4", OWN, HEAD_INT4),
            ("vocab 4096, draft side int4", VOCABULARY, HEAD_INT4),
        ],
        "int4": [("vocab 4096", VOCABULARY, ()), ("draft side int8", OWN, HEAD_INT8), ("draft side float", OWN, HEAD_FLOAT)],
    }
    return [variant(f"{head}, {label}", head, precision, mtp, overrides)
            for precision, rows in options.items() for label, mtp, overrides in rows for head in ("best", "realistic")]
