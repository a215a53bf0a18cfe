"""`mtpc tune`: how fast a package decodes on this machine with 0..N drafts per step, and which N to use.

- `package`: which packages can run here, and what tune needs to know about one;
- `prompts`: the user's prompts file, or the built-in handful;
- `measure`: the package loaded in onnxruntime-genai (`Runtime`), greedy continuations, where the head's
  drafts match, step costs;
- `decode`: plain and og.MtpGenerator decoding timed round by round, acceptance per draft position
  (what bench/mtp_speedup.py and bench/tune_accuracy.py measure);
- `profile`: an og.MtpGenerator round split by onnxruntime's profiler into head forwards, verify,
  replays and the runtime's own work (bench/decode_profile.py --mtp);
- `schedule`: what og.MtpGenerator does per round for any N (operations and its own counters);
- `predict`: tokens/s per N from a schedule and the step costs, and the recommendation;
- `report`: the JSON report (schemas/tune_report.schema.json) and reading it back for a model card;
- `run`: `tune`, all of the above in order (what the verb and bench/ call).

This is the one place that runs a package in onnxruntime-genai and measures it (`mtpc verify` reads a
package's head folder with `package.head_folder` too). The runtime (onnxruntime-genai) is imported only
by `measure` and `report.runtime_facts`.
"""

from .run import TuneResult, require_runtime, tune  # noqa: F401
