"""Step-3.5's three chained MTP layers: what the package drafts with, against the checkpoint's own chain.

onnxruntime-genai 0.18.0's MtpGenerator drafts N tokens by running the one head graph N times on its own hidden
output ("model.mtp.num_hidden_layers must be 1", and no input says the draft position), so the package drafts every
position with the first MTP layer. The fixture's three layers are fitted to different steps of the greedy
continuations, so the checkpoint's chain (layer k at position k, what vLLM and llama.cpp's draft-mtp do) and the
package's (layer 1 everywhere) accept differently, round by round:

- og.MtpGenerator decodes, drafts and accepts exactly as the numpy rendition of the first layer chained on itself;
- llama.cpp's draft-mtp on the converter's file of the same release (its three `blk.{5,6,7}` MTP blocks, chained by
  `nextn_layer_offset`) accepts round by round as the numpy rendition of the checkpoint's chain, after its first
  round (which drafts from the prompt's last token, before the first generated one);
- the two renditions differ, so the comparison tells one chain from the other.

docs/chained-heads.md has the acceptance per draft position (bench/chained_heads.py prints it).
"""

from __future__ import annotations

import re

from tests.clients import llama_cpp_runtime
from tests.fixtures.chained_heads import chain, simulate_chain
from tests.fixtures.glm4moe_checkpoints import prompt_bytes
from tests.fixtures.llama_cpp_tools import llama_cpp_binary  # noqa: F401  (a fixture)
from tests.fixtures.step35_checkpoints import PROMPTS
from tests.runtime import decoding

STEPS, DRAFTS = 30, 3


def test_the_package_drafts_with_its_first_mtp_layer_at_every_position(models, arch, store, main_reference):
    heads = chain(arch, store)
    for prompt in PROMPTS:
        run = decoding.speculative(*models, list(prompt), STEPS, DRAFTS)
        first = simulate_chain(main_reference, heads[:1], list(prompt), STEPS, DRAFTS)
        assert run.tokens == first.tokens
        assert (run.proposed, run.accepted) == (sum(n for n, _ in first.rounds), sum(a for _, a in first.rounds))
        whole = simulate_chain(main_reference, heads, list(prompt), STEPS, DRAFTS)
        assert whole.tokens == first.tokens and whole.rounds != first.rounds  # the chains are told apart


def test_llama_cpp_chains_the_three_layers_as_the_reference_rendition(llama_cpp_binary, step_dir, gguf, arch, store,
                                                                      main_reference):
    heads = chain(arch, store)
    for prompt in PROMPTS:
        run = llama_cpp_runtime.speculative(gguf, prompt_bytes(prompt), STEPS, DRAFTS, step_dir)
        rounds = [(int(n), int(a)) for a, n in re.findall(r"accepted (\d+)/(\d+) draft tokens", run.log)][1:]
        expected = simulate_chain(main_reference, heads, list(prompt), STEPS, DRAFTS).rounds
        common = next((i for i, (x, y) in enumerate(zip(rounds, expected)) if x[0] != y[0]), len(expected))
        assert common >= 8 and rounds[:common] == expected[:common], (rounds, expected)
        first_only = simulate_chain(main_reference, heads[:1], list(prompt), STEPS, DRAFTS).rounds
        assert rounds[:common] != first_only[:common]


def test_the_model_card_plan_and_tune_say_what_the_package_does(package, step_dir, capsys):
    from mtpc.cli.main import main
    from mtpc.tuning.package import draft_note

    assert "the first of the source's 3 chained MTP layers, run at every draft position" in draft_note(package)
    card = (package / "README.md").read_text("utf-8")
    # 6 layers (the head's included) x 2 x 2 KV heads x 16 x 4 bytes x 32768 tokens; windows of 8: 4 layers x 8.
    assert ("KV cache per sequence at 32,768 tokens: 48 MiB (float32; 6 layers with the head). The sliding layers "
            "hold the whole context too, their window of 8 applied in the graph, because onnxruntime-genai 0.18.0 "
            "refuses to rewind a window-sized KV cache once it has evicted") in card
    assert main(["plan", str(step_dir / "step.yaml")]) == 0
    out = capsys.readouterr().out
    assert ("head onnxruntime_genai: mtp/mtp.onnx, 1 sliding-window layer (window 8 in the graph; its KV cache holds "
            "the whole context), 2 KV heads x 16") in out
    assert "mtp head: 1 block (the first of 3 chained)" in out
