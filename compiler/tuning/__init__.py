"""`mtpc tune`: how fast a package decodes on this machine with 0..N drafts per step, and which N to use.

- `package`: which packages can run here, and what tune needs to know about one;
- `prompts`: the user's prompts file, or the built-in handful;
- `measure`: onnxruntime-genai runs: greedy continuations, where the head's drafts match, step costs;
- `schedule`: what og.MtpGenerator does per round for any N (operations and its own counters);
- `predict`: tokens/s per N from a schedule and the step costs, and the recommendation;
- `report`: the JSON report (schemas/tune_report.schema.json) and reading it back for a model card;
- `run`: `tune`, all of the above in order (what the verb and bench/ call).

The runtime (onnxruntime-genai) is imported only by `measure` and `report.runtime_facts`.
"""

from .run import TuneResult, require_runtime, tune  # noqa: F401
