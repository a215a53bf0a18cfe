"""What `mtpc verify` and `mtpc tune` decode when given no prompts, and the draft counts onnxruntime-genai accepts.

Kept at the bottom layer because a synthetic source with a fitted head (`source.synthetic.mtp_head: fitted`,
`mtpc.sources.fitted_head`) memorises the greedy continuations of exactly these prompts, so the first `verify`
and `tune` of such a package show drafts that are accepted.
"""

# `mtpc verify`'s prompt (token ids) and its defaults.
VERIFY_PROMPT = (1, 17, 42, 99, 5, 23)
VERIFY_NEW_TOKENS = 8
VERIFY_DRAFT_TOKENS = 2

# `mtpc tune`'s built-in prompts: short, varied, plain ASCII (any tokenizer encodes them): code, a list, prose,
# a question, a table.
TUNE_PROMPTS = (
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "Shopping list: eggs, milk, bread, butter, apples,",
    "The history of the printing press begins in the fifteenth century, when",
    "Q: What is the capital of France?\nA:",
    "| year | population |\n|------|------------|\n| 1990 | 5.2 million |\n|",
)

MAX_DRAFT_TOKENS = 16  # onnxruntime-genai 0.18.0 accepts max_draft_tokens in 1..16
