"""How often the trained head's drafts are accepted, by draft position, on held-out code: og against llama.cpp.

    .venv/bin/python bench/trained_acceptance.py [--prompts 40] [--new-tokens 64] [--drafts 4] [--work DIR]
                                                 [--json FILE]

Both runtimes decode the same weights: llama.cpp's own converter writes the checkpoint
(models/qwen35-stdlib-mtp) as an f32 GGUF (exactly its bfloat16 values), llama.cpp decodes that
file with `llama-speculative-simple --spec-type draft-mtp` (greedy), and onnxruntime-genai
decodes mtpc's float32 package of the very same file with `og.MtpGenerator`. Each prompt is an
opening of held-out code (bench/trained_model.py), given to llama.cpp as text and to og as the
tokenizer's ids; each decodes `--new-tokens` tokens with `--drafts` drafts per round.

Acceptance at position k: of the rounds whose drafts 1..k-1 were accepted and which drafted a
k-th, the share whose k-th was accepted (mtpc.tuning.decode.round_acceptance; llama.cpp's rounds
are read from its debug log: `accepted A/N` per round, and for a recurrent model `partial
acceptance: A < N` before the checkpoint replay that it then counts as a round of its own, which
is not the head's and is left out here). Both also print whether their tokens are the plain
greedy ones of the other (same text).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.trained_model import compile_package, gguf, prompts  # noqa: E402

# Holds four drafts (the default, 2, would window W = 3 and cap a round at 2): --drafts goes up to 4.
FLOAT_PACKAGE = "precision: {io_dtype: float32}\ntargets:\n  onnxruntime_genai: {execution_provider: cpu, max_draft_tokens: 4}\n"


def og_rounds(package: Path, encoded: list[list[int]], new_tokens: int, drafts: int) -> list[tuple[list, list]]:
    """Per prompt: (rounds as (drafted, accepted), generated tokens)."""
    from mtpc.tuning.decode import decode
    from mtpc.tuning.package import open_package
    from mtpc.tuning.runtime import Runtime

    runtime = Runtime(open_package(package, needs_tokenizer=False), 1)
    out = []
    for ids in encoded:
        run = decode(runtime, ids, new_tokens, drafts)
        out.append(([(r.drafted, r.accepted) for r in run.rounds], list(run.tokens)))
    return out


def llama_rounds(path: Path, text: str, new_tokens: int, drafts: int, work: Path) -> tuple[list, bytes]:
    """(the head's rounds as (drafted, accepted), the generated text) from one llama.cpp run."""
    from tests.clients import llama_cpp_runtime

    prompt = work / "prompt.txt"
    prompt.write_bytes(text.encode("utf-8"))
    command = [str(llama_cpp_runtime.build()), "-m", str(path), "-f", str(prompt), "-n", str(new_tokens),
               "--temp", "0", "--top-k", "1", "--spec-type", "draft-mtp", "--spec-draft-n-max", str(drafts),
               "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "-c", "1024", "-t", "1", "--seed", "0",
               "-lv", "5", "--no-repack"]
    for _ in range(llama_cpp_runtime.RUNS):  # its logger may lose the tail of a run (tests/clients/llama_cpp_runtime.py)
        done = subprocess.run(command, capture_output=True)
        log = done.stderr.decode("utf-8", "replace")
        if done.returncode:
            raise SystemExit(f"llama.cpp failed:\n{log[-4000:]}")
        if "n_accept" in log:
            return parse_rounds(log), done.stdout
    raise SystemExit(f"llama.cpp printed no counters in {llama_cpp_runtime.RUNS} runs:\n{log[-4000:]}")


def parse_rounds(log: str) -> list[tuple[int, int]]:
    """The head's rounds in llama-speculative-simple's debug log: a round is `accepted A/N` (A of N drafts), except
    that a partial acceptance prints `partial acceptance: A < N` first and its replay's `accepted` line, which
    re-verifies the A accepted drafts and the target's token as a draft of its own, belongs to no head round."""
    rounds, replay = [], False
    for line in log.splitlines():
        if "partial acceptance:" in line:
            accepted, drafted = (int(w) for w in line.split("partial acceptance:")[1].split(",")[0].split("<"))
            rounds.append((drafted, accepted))
            replay = True
        elif "accepted " in line and " draft tokens" in line:
            if replay:
                replay = False
                continue
            accepted, drafted = (int(w) for w in line.split("accepted ")[1].split(" draft tokens")[0].split("/"))
            if drafted:
                rounds.append((drafted, accepted))
    return rounds


def by_position(rounds: list[tuple[int, int]], drafts: int) -> list[tuple[int, int]]:
    """(tried, accepted) at each draft position 1..drafts."""
    out = []
    for k in range(1, drafts + 1):
        judged = [(d, a) for d, a in rounds if d >= k and a >= k - 1]
        out.append((len(judged), sum(a >= k for _, a in judged)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--drafts", type=int, default=4)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="mtpc-trained-"))
    chosen = prompts(args.prompts)
    f32 = gguf(work, "f32")
    package = compile_package(work, "gguf-f32", FLOAT_PACKAGE, source=f"{{gguf: {f32}}}")
    og = og_rounds(package, [ids for _, ids in chosen], args.new_tokens, args.drafts)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(REPO / "models" / "qwen35-stdlib-mtp" / "tokenizer.json"))
    llama, same = [], 0
    for (text, _), (_, tokens) in zip(chosen, og):
        rounds, generated = llama_rounds(f32, text, args.new_tokens, args.drafts, work)
        llama.append(rounds)
        og_text = tok.decode(tokens, skip_special_tokens=False).encode("utf-8")
        shown = generated.split(text.encode("utf-8"), 1)[-1]
        same += shown[: len(og_text)] == og_text or og_text.startswith(shown)
    og_pos = by_position([r for rounds, _ in og for r in rounds], args.drafts)
    llama_pos = by_position([r for rounds in llama for r in rounds], args.drafts)
    lines = ["| draft position | og accepted | og share | llama.cpp accepted | llama.cpp share | og - llama.cpp |",
             "|---:|---:|---:|---:|---:|---:|"]
    for k, ((ot, oa), (lt, la)) in enumerate(zip(og_pos, llama_pos), 1):
        o, l = oa / max(ot, 1), la / max(lt, 1)
        lines.append(f"| {k} | {oa} / {ot} | {o:.1%} | {la} / {lt} | {l:.1%} | {100 * (o - l):+.1f} points |")
    tokens_per_round = lambda rs: sum(a + 1 for _, a in rs) / max(1, len(rs))  # noqa: E731
    og_all = [r for rounds, _ in og for r in rounds]
    llama_all = [r for rounds in llama for r in rounds]
    print("\n".join(lines))
    print(f"\ntokens per round: og {tokens_per_round(og_all):.2f}, llama.cpp {tokens_per_round(llama_all):.2f}; "
          f"same text from both runtimes on {same} of {len(chosen)} prompts "
          f"({args.prompts} held-out prompts, {args.new_tokens} new tokens, {args.drafts} drafts)")
    if args.json:
        args.json.write_text(json.dumps({"og": og_pos, "llama": llama_pos, "same_text": same,
                                         "prompts": len(chosen)}, indent=1))


if __name__ == "__main__":
    main()
