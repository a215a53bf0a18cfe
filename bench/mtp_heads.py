"""One seeded Qwen3.5 checkpoint with three MTP heads: the best, the worst and a realistic case.

    python bench/mtp_heads.py OUT [--size mtp]      # writes OUT/trunk, OUT/best, OUT/worst

Every variant is a Hugging Face checkpoint folder holding the same trunk (one `trunk.safetensors`
written once, linked into each folder) and its own `head.safetensors` (the `mtp.*` tensors and the
trunk's final norm), so the packages compiled from them have the same tensors and the same compute:

- **best**: the trunk's final norm and the head's `mtp.norm` zeroed (effective scale 0) but for one
  channel c, which the embedding holds far above the rest for every token (and the head's `mtp.fc`
  passes through), so both post-norm hiddens are a positive multiple of e_c and both always pick
  t* = argmax_t lm_head[t, c]: every draft is accepted, in every runtime (all-zero logits would
  leave the choice to each runtime's tie-breaking, and llama.cpp's sampler and draft break ties
  differently). t* is a single-byte token, in any draft vocabulary;
- **worst**: the seeded random head: drafts are (almost) never accepted;
- **realistic** (`write_realistic`): the head fitted to a package's own greedy continuation of a
  prompt as `tests/fixtures/fitted_head.py` fits the tests' head: its decoder layer adds nothing
  (`o_proj`, `down_proj` zero), `mtp.norm` is the trunk's final norm and `mtp.fc` a least-squares
  map from (embedding of token s, the hidden that predicted it) to the trunk's own hidden at s,
  but only at a seeded `share` of the steps. Drafts after those steps are right, the others
  wrong, so about `share` of first drafts are accepted and fewer of the later ones, as with
  trained heads. The hiddens come from the package (its `hidden_states` output through
  onnxruntime-genai), so an int4 package gets a head fitted to its own int4 continuation.

The checkpoint is bfloat16 like `vs_builder.py`'s (the fitted head is stored in float32: its fit
is exact only unrounded) with that bench's byte-level tokenizer and its one merge (llama.cpp's
converter needs one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.compile_bench import SIZES, architecture  # noqa: E402

TEXT = "model.language_model."
FINAL_NORM = TEXT + "norm.weight"
EMBEDDING = TEXT + "embed_tokens.weight"
HEAD_LAYER = "mtp.layers.0."
# The best case's channel in the embedding: far above the N(0, 1) of the others.
BEST_CHANNEL_VALUE = 64.0


def _is_head(name: str) -> bool:
    """What a variant may change: the head, the final norm and the embedding (the best case's channel)."""
    return name.startswith("mtp.") or name in (FINAL_NORM, EMBEDDING)


def _stored(values: np.ndarray) -> np.ndarray:
    """`values` as the bfloat16 checkpoint holds them, back in float32."""
    from tests.fixtures.safetensors_writer import to_bfloat16_bits

    return (to_bfloat16_bits(values).astype(np.uint32) << 16).view(np.float32).reshape(values.shape)


class Checkpoints:
    """The trunk written once into `root/trunk`, and head variants beside it."""

    def __init__(self, root: Path, size: str = "mtp", seed: int = 0):
        from mtpc.sources.random_weights import raw_hf_tensors

        # The best case decodes token 0 forever, and onnxruntime-genai masks the pad token out of attention:
        # pad is bos here, as in Qwen3.5's own configs, so token 0 is an ordinary byte.
        arch = architecture(size)
        self.root, self.arch = Path(root), replace(arch, tokens=replace(arch.tokens, pad=arch.tokens.bos))
        raw = raw_hf_tensors(self.arch, seed, with_mtp=True)
        self.trunk = {n: v for n, v in raw.items() if not _is_head(n)}
        self.head = {n: v for n, v in raw.items() if _is_head(n)}

    def write_trunk(self) -> Path:
        from bench.vs_builder import _add_a_merge
        from mtpc.emit.tokenizer import synthetic_tokenizer_files
        from tests.fixtures.checkpoints import hf_config
        from tests.fixtures.safetensors_writer import write_safetensors

        folder = self.root / "trunk"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(hf_config(self.arch, with_mtp=True), indent=2, sort_keys=True))
        tokens = self.arch.tokens
        generation = {"bos_token_id": tokens.bos, "eos_token_id": list(tokens.eos), "pad_token_id": tokens.pad}
        (folder / "generation_config.json").write_text(json.dumps(generation, indent=2, sort_keys=True))
        for relpath, content in synthetic_tokenizer_files(self.arch):
            (folder / relpath).write_bytes(content)
        _add_a_merge(folder / "tokenizer.json")
        write_safetensors(folder / "trunk.safetensors", self.trunk, float_dtype="BF16")
        return folder

    def write_variant(self, name: str, head: dict[str, np.ndarray], float_dtype: str = "BF16") -> Path:
        from tests.fixtures.safetensors_writer import write_safetensors

        trunk, folder = self.root / "trunk", self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        for item in trunk.iterdir():
            link = folder / item.name
            if not link.exists():
                os.symlink(item.resolve(), link)
        write_safetensors(folder / "head.safetensors", head, float_dtype=float_dtype)
        size = {"BF16": 2, "F16": 2, "F32": 4}
        total = sum(v.size * 2 for v in self.trunk.values()) + sum(v.size * size[float_dtype] for v in head.values())
        weight_map = {**{n: "trunk.safetensors" for n in self.trunk}, **{n: "head.safetensors" for n in head}}
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
        return folder

    def best(self) -> Path:
        head = dict(self.head)
        c = self.best_channel()
        for name in (FINAL_NORM, "mtp.norm.weight"):
            head[name] = np.full_like(head[name], -1.0)  # offset form: effective scale 1 + w = 0 ...
            head[name][c] = 0.0  # ... but 1 at channel c
        head[EMBEDDING] = head[EMBEDDING].copy()
        head[EMBEDDING][:, c] = BEST_CHANNEL_VALUE
        fc = head["mtp.fc.weight"] = head["mtp.fc.weight"].copy()
        fc[c] = 0.0
        fc[c, c] = 1.0  # the head's channel c is the normed embedding's (its input is [embedding | hidden])
        return self.write_variant("best", head)

    def best_channel(self) -> int:
        """The first hidden channel whose largest LM-head weight belongs to a single-byte token (no special)."""
        lm_head = self.trunk["lm_head.weight"]
        specials = {self.arch.tokens.bos, self.arch.tokens.pad, *self.arch.tokens.eos}
        for c in range(lm_head.shape[1]):
            token = int(np.argmax(lm_head[:, c]))
            if token not in specials and token < 258:  # the tiny tokenizer: 256 bytes on ids 0-257 but the specials
                return c
        raise ValueError("no channel picks a single-byte token")

    def worst(self) -> Path:
        return self.write_variant("worst", dict(self.head))

    def write_realistic(self, name: str, package: Path, prompt: list[int], steps: int, share: float = 0.6,
                        seed: int = 0) -> Path:
        """A variant whose head is fitted to `package`'s greedy continuation of `prompt` (see the module)."""
        tokens, post = trunk_continuation(package, prompt, steps)
        return self.write_variant(name, self.fitted_head(prompt, tokens, post, share, seed), float_dtype="F32")

    def fitted_head(self, prompt: list[int], tokens: list[int], post: np.ndarray, share: float,
                    seed: int) -> dict[str, np.ndarray]:
        """`post[i]` is the trunk's post-norm hidden at position i of prompt + tokens."""
        from mtpc.reference.forward import rms_norm

        eps = self.arch.rms_norm_eps
        effective = lambda name: _stored(self.head[name]).astype(np.float64) + 1.0  # noqa: E731
        final = effective(FINAL_NORM)
        embedding = self.head[EMBEDDING]
        memorised = np.random.default_rng(seed).random(len(tokens)) < share
        rows = [s for s in range(len(tokens) - 1) if memorised[s]]
        if len(rows) >= 2 * self.arch.hidden_size:
            raise ValueError("too many memorised steps for an exact fit; decode fewer steps")
        position = [len(prompt) + s for s in rows]  # where tokens[s] sits; its seed hidden is the one before
        inputs = np.concatenate([
            rms_norm(_stored(embedding[[tokens[s] for s in rows]]).astype(np.float64),
                     effective("mtp.pre_fc_norm_embedding.weight"), eps),
            rms_norm(post[[p - 1 for p in position]].astype(np.float64), effective("mtp.pre_fc_norm_hidden.weight"), eps),
        ], axis=-1)
        # The head's output is mtp.norm(fc(inputs)) with mtp.norm = the final norm, so fc must point
        # along the trunk's pre-norm hidden, which is the post-norm one over the final norm's scales.
        targets = post[position].astype(np.float64) / final
        targets /= np.sqrt(np.mean(targets * targets, axis=-1, keepdims=True))
        fc_t, *_ = np.linalg.lstsq(inputs, targets, rcond=None)
        # Stored in float32 for the fit's sake, every other tensor of the file holds the bfloat16 value the
        # other variants hold: the embedding and final norm live here too, and a trunk that differs from
        # the one the fit decoded (by bfloat16's rounding) continues the prompt otherwise (at int4 it did
        # from the 8th token, and the head then drafted a continuation the package never makes).
        head = {name: _stored(value) for name, value in self.head.items()}
        head["mtp.fc.weight"] = np.ascontiguousarray(fc_t.T, dtype=np.float32)
        head["mtp.norm.weight"] = _stored(self.head[FINAL_NORM])
        for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
            head[HEAD_LAYER + name] = np.zeros_like(self.head[HEAD_LAYER + name])
        return head


def trunk_continuation(package: Path, prompt: list[int], steps: int) -> tuple[list[int], np.ndarray]:
    """The package's greedy tokens after `prompt` and its post-norm hidden at every position, read
    from onnxruntime-genai (its main graph's `hidden_states` output), in a child process."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mtpc-fit-") as tmp:
        out = Path(tmp) / "continuation.npz"
        subprocess.run([sys.executable, __file__, "--continuation", str(package), json.dumps(prompt), str(steps),
                        str(out)], check=True)
        data = np.load(out)
        return [int(t) for t in data["tokens"]], data["post"]


def _continuation_child(package: Path, prompt: list[int], steps: int, out: Path) -> None:
    import onnxruntime_genai as og

    model = og.Model(str(package))
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(prompt) + steps + 1)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    # append_tokens runs the prompt; each later generate_next_token runs the token chosen before it.
    hidden = [generator.get_output("hidden_states")[0]]
    generator.generate_next_token()
    while not generator.is_done():
        generator.generate_next_token()
        hidden.append(generator.get_output("hidden_states")[0])
    tokens = [int(t) for t in generator.get_sequence(0)][len(prompt):]
    np.savez(out, tokens=np.asarray(tokens[:steps]), post=np.concatenate(hidden)[: len(prompt) + steps])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--size", choices=sorted(SIZES), default="mtp")
    parser.add_argument("--continuation", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.continuation:
        package, prompt, steps, out = args.continuation
        _continuation_child(Path(package), json.loads(prompt), int(steps), Path(out))
        return
    if args.out is None:
        parser.error("name the output folder")
    checkpoints = Checkpoints(args.out, args.size)
    checkpoints.write_trunk()
    for folder in (checkpoints.best(), checkpoints.worst()):
        print(folder)


if __name__ == "__main__":
    main()
