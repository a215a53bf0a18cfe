"""A 27B-shaped Qwen3.5 GGUF with an MTP head, as a sparse file: full metadata, no weight bytes;
or the same model as a Hugging Face folder of sparse bf16 safetensors shards.

    python bench/sparse_source.py OUT.gguf [--dense]
    python bench/sparse_source.py OUT_FOLDER --hf

The header, every key a Qwen3.5-27B GGUF carries (its 248,320-token byte-level BPE
vocabulary with merges included) and every tensor's info are written for real; the
tensor data region is a hole (`truncate`), so the file claims ~15 GB and occupies a few
megabytes. The metadata verbs (`inspect`, `check SPEC`, `plan`, `diff`) must answer from
the header alone, so this is what they are timed on. `--dense` fills the data with
pseudo-random bytes instead (a real 15 GB file for the keep: source compile benchmark;
its Q4_0/Q8_0 scales are random float16 bits, so the values are nonsense but the bytes
are real and must be read).

`--hf` writes the folder a `Qwen3_5ForConditionalGeneration` release holds: `config.json`,
`generation_config.json`, `tokenizer.json` and `tokenizer_config.json` (the same 248,320-token
vocabulary with merges), and 54 GB of bfloat16 weights in 5 GB shards listed by
`model.safetensors.index.json`, each shard a real header over a hole. A vision tower's tensors
sit beside the text model's, as in the release, under `model.visual.` (their shapes are
approximate: mtpc only steps over them).

Shapes follow Qwen3.5-27B's config.json: hidden 5120, 64 layers (3 linear-attention to 1
full), intermediate 17408, 24 heads x 256 over 4 KV heads, 16 key / 48 value linear heads
x 128, vocab 248,320, one MTP layer. Projections Q4_0 (Q8_0 for eh_proj, alpha and beta,
as in real MTP GGUFs), norms F32, embedding and output Q8_0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from fnmatch import fnmatchcase
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gguf import GGMLQuantizationType as QT, GGUFWriter, TokenType  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402

from mtpc.ir import Architecture, LayerKind, LinearAttentionDims, Rope, TokenIds  # noqa: E402
from mtpc.sources.tokenizer_json import added_token, byte_level_bpe, dump  # noqa: E402
from mtpc.weights import canonical_shapes  # noqa: E402
from tests.fixtures.checkpoints import hf_config  # noqa: E402
from tests.fixtures.gguf_writer import MIXED_TYPES, _bytes_to_unicode, add_metadata, gguf_name  # noqa: E402
from tests.fixtures.safetensors_writer import write_sparse_safetensors  # noqa: E402

TYPES = MIXED_TYPES + (("token_embd.weight", QT.Q8_0), ("output.weight", QT.Q8_0))


def architecture_27b() -> Architecture:
    full, linear = LayerKind.FULL_ATTENTION, LayerKind.LINEAR_ATTENTION
    return Architecture(
        family="qwen35",
        hidden_size=5120,
        intermediate_size=17408,
        num_attention_heads=24,
        num_key_value_heads=4,
        head_dim=256,
        vocab_size=248320,
        layer_kinds=tuple(full if (i + 1) % 4 == 0 else linear for i in range(64)),
        rms_norm_eps=1e-6,
        rope=Rope(theta=10000000.0, partial_rotary_factor=0.25, head_dim=256, mrope_section=(11, 11, 10)),
        context_length=262144,
        tokens=TokenIds(bos=248044, eos=(248046,), pad=248044),
        linear_attention=LinearAttentionDims(
            num_key_heads=16, key_head_dim=128, num_value_heads=48, value_head_dim=128, conv_kernel=4
        ),
        tie_word_embeddings=False,
        mtp_num_layers=1,
    )


def vocabulary(arch: Architecture) -> tuple[list[str], list[int], list[str]]:
    """Byte-level BPE of the architecture's size: every byte, then two- and three-byte merges, specials last."""
    chars = _bytes_to_unicode()
    base = [chars[b] for b in range(256)]
    specials = {arch.tokens.bos: "<|im_start|>", arch.tokens.eos[0]: "<|endoftext|>"}
    n_regular = arch.vocab_size - len(specials) - 2  # room at the end for the specials and two spare ids
    tokens, merges = list(base), []
    for a in base:
        for b in base:
            if len(tokens) >= n_regular:
                break
            tokens.append(a + b)
            merges.append(f"{a} {b}")
    pairs = iter(tokens[256 : 256 + 65536])
    while len(tokens) < n_regular:
        pair = next(pairs)
        for c in base:
            if len(tokens) >= n_regular:
                break
            tokens.append(pair + c)
            merges.append(f"{pair} {c}")
    types = [int(TokenType.NORMAL)] * len(tokens)
    while len(tokens) < arch.vocab_size:
        token_id = len(tokens)
        tokens.append(specials.get(token_id, f"<|extra_{token_id}|>"))
        types.append(int(TokenType.CONTROL))
    return tokens, types, merges


def gguf_shape(canonical: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], shape[2]) if canonical.endswith("conv1d.weight") else shape


def write(path: Path, arch: Architecture, *, dense: bool = False) -> Path:
    w = GGUFWriter(str(path), arch="qwen35")
    add_metadata(w, arch, tokenizer=vocabulary(arch), recurrent_layers=True)
    for canonical, shape in sorted(canonical_shapes(arch).items()):
        name = gguf_name(canonical, arch.num_layers)
        shape = gguf_shape(canonical, shape)
        add_tensor_info(w, name, shape,
                        next((t for p, t in TYPES if fnmatchcase(name, p)), QT.F32) if len(shape) > 1 else QT.F32)
    return finish_sparse(w, path, dense=dense)


def add_tensor_info(w: GGUFWriter, name: str, shape: tuple[int, ...], qtype: QT) -> None:
    """A tensor's info (numpy `shape`, type), its bytes to come: `finish_sparse` writes none."""
    block, type_size = GGML_QUANT_SIZES[qtype]
    byte_shape = (*shape[:-1], shape[-1] // block * type_size)
    nbytes = int(np.prod(byte_shape))
    if qtype == QT.F32:
        w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes)
    else:  # gguf-py takes a quantized tensor's shape in bytes
        w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes, raw_dtype=qtype)


def finish_sparse(w: GGUFWriter, path: Path, *, dense: bool = False) -> Path:
    """The header, keys and tensor infos written, the data region a hole of its full size (random bytes if `dense`)."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.fout[0].flush()
    header_end = w.fout[0].tell()
    w.close()
    data_start = -(-header_end // w.data_alignment) * w.data_alignment
    end = data_start + sum(GGUFWriter.ggml_pad(ti.nbytes, w.data_alignment) for ti in w.tensors[0].values())
    with open(path, "r+b") as f:
        f.truncate(end)
        if dense:
            f.seek(data_start)
            rng = np.random.default_rng(0)
            chunk = 64 << 20
            for offset in range(data_start, end, chunk):
                f.write(rng.integers(0, 256, min(chunk, end - offset), dtype=np.uint8).tobytes())
            f.flush()
            os.fsync(f.fileno())
    return path


SHARD_BYTES = 5 * 10**9  # transformers' save_pretrained default
VISION_BLOCKS, VISION_WIDTH, VISION_MLP, PATCH = 27, 1152, 4304, 2 * 3 * 16 * 16


def hf_name(canonical: str) -> str:
    """What a Qwen3_5ForConditionalGeneration checkpoint calls a canonical tensor."""
    if canonical.startswith("mtp.") or canonical == "lm_head.weight":
        return canonical
    if canonical.endswith("linear_attn.decay_scale"):
        canonical = canonical[: -len("decay_scale")] + "A_log"
    return "model.language_model." + canonical


def vision_shapes() -> dict[str, tuple[int, ...]]:
    w, m = VISION_WIDTH, VISION_MLP
    shapes: dict[str, tuple[int, ...]] = {"model.visual.patch_embed.proj.weight": (w, 3, 2, 16, 16),
                                          "model.visual.patch_embed.proj.bias": (w,),
                                          "model.visual.pos_embed.weight": (2304, w)}
    for i in range(VISION_BLOCKS):
        p = f"model.visual.blocks.{i}."
        shapes.update({p + "attn.qkv.weight": (3 * w, w), p + "attn.qkv.bias": (3 * w,), p + "attn.proj.weight": (w, w),
                       p + "attn.proj.bias": (w,), p + "mlp.linear_fc1.weight": (m, w), p + "mlp.linear_fc1.bias": (m,),
                       p + "mlp.linear_fc2.weight": (w, m), p + "mlp.linear_fc2.bias": (w,), p + "norm1.weight": (w,),
                       p + "norm1.bias": (w,), p + "norm2.weight": (w,), p + "norm2.bias": (w,)})
    merged = 4 * w
    shapes.update({"model.visual.merger.norm.weight": (w,), "model.visual.merger.norm.bias": (w,),
                   "model.visual.merger.linear_fc1.weight": (merged, merged), "model.visual.merger.linear_fc1.bias": (merged,),
                   "model.visual.merger.linear_fc2.weight": (5120, merged), "model.visual.merger.linear_fc2.bias": (5120,)})
    return shapes


def write_hf(folder: Path, arch: Architecture) -> Path:
    """The checkpoint folder (see the module's docstring); returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(hf_config(arch), indent=2, sort_keys=True))
    generation = {"bos_token_id": arch.tokens.bos, "eos_token_id": list(arch.tokens.eos), "pad_token_id": arch.tokens.pad}
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2, sort_keys=True))
    tokens, types, merges = vocabulary(arch)
    control = {i for i, t in enumerate(types) if t == int(TokenType.CONTROL)}
    vocab = {t: i for i, t in enumerate(tokens) if i not in control}
    added = [added_token(i, tokens[i], special=True) for i in sorted(control)]
    (folder / "tokenizer.json").write_bytes(dump(byte_level_bpe(vocab, merges, added)))
    config = {"bos_token": tokens[arch.tokens.bos], "eos_token": tokens[arch.tokens.eos[0]],
              "pad_token": tokens[arch.tokens.pad], "model_max_length": arch.context_length,
              "tokenizer_class": "Qwen2Tokenizer"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    shapes = {hf_name(n): s for n, s in canonical_shapes(arch).items()} | vision_shapes()
    shards: list[dict[str, tuple[int, ...]]] = [{}]
    size = 0
    for name, shape in sorted(shapes.items()):
        nbytes = 2 * int(np.prod(shape))
        if size and size + nbytes > SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][name] = shape
        size += nbytes
    weight_map, total = {}, 0
    for i, shard in enumerate(shards, start=1):
        filename = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        total += write_sparse_safetensors(folder / filename, shard)
        weight_map.update(dict.fromkeys(shard, filename))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--dense", action="store_true", help="write real (pseudo-random) data bytes: ~15 GB")
    parser.add_argument("--hf", action="store_true", help="write a Hugging Face folder of sparse bf16 shards instead")
    args = parser.parse_args()
    if args.hf:
        folder = write_hf(args.out, architecture_27b())
        files = list(folder.iterdir())
        claimed = sum(f.stat().st_size for f in files)
        on_disk = sum(os.stat(f).st_blocks * 512 for f in files)
        print(f"{folder}: {len(files)} files, {claimed / 1e9:.1f} GB claimed, {on_disk / 1e6:.1f} MB on disk")
        return
    path = write(args.out, architecture_27b(), dense=args.dense)
    print(f"{path}: {path.stat().st_size / 1e9:.1f} GB claimed, {os.stat(path).st_blocks * 512 / 1e6:.1f} MB on disk")


if __name__ == "__main__":
    main()
