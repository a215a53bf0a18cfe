"""`mtpc verify`: run a package and compare it with the numpy reference, as a `VerifyResult`.

The package does not record where its weights came from (it holds only what
its runtimes read), so `verify` takes the spec it was compiled from and
re-derives the weights from the spec's source. Steps, stopping at the first
that fails:

1. the static checks of `mtpc check DIR`;
2. onnxruntime: `model.onnx` on a prompt (prefill) and one more token (a step
   with the caches it returned), logits and the hidden state the head is
   seeded from, against `mtpc.reference.forward.DecoderReference`;
3. the MTP head graph named by `model.mtp.filename` on the same tokens, seeded
   with the reference's hidden state, against `MtpHeadReference`; likewise the
   onnx-genai head the speculator config names, fed the embedded tokens;
4. onnxruntime-genai: plain greedy decoding, then `og.MtpGenerator`
   speculative decoding from the head's own folder; the two token sequences
   must be identical. The draft acceptance rate is reported.

Paged packages (CUDA, packed `[N]` inputs) cannot run on CPU: only step 1, and
the verdict says so; that is exit code 2 (the package was not run), unless `static_only`
asked for the static checks alone. A package with an MTP head checked against a spec whose
source ships none is the wrong spec: a failed check, not a note.
A runtime that refuses the package (a graph it cannot load or run) is a failed
check with the runtime's one-line reason, not a crash.

- `run`: `verify` and its result, the steps in order and the verdict;
- `steps`: the comparisons of steps 2 to 4 (`compare_package`) and what they found (`Report`);
- `runner`: a dense graph fed to onnxruntime with its caches, a runtime's refusal as a finding;
- `tolerance`: how closely each output must match, and the weights as a quantized build computes with them.

Above `pipeline` (it builds the spec's IR) and below `api`, which re-exports `verify` as `mtpc.verify`;
the verb (`mtpc.cli.verify`) parses its arguments and renders the result.
"""

from .run import (  # noqa: F401
    DEFAULT_DRAFT_TOKENS, DEFAULT_NEW_TOKENS, DEFAULT_PROMPT, MAX_DRAFT_TOKENS, NOT_RUN_HINT, VerifyResult, verify,
)
