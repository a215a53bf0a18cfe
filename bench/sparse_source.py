"""A 27B-shaped Qwen3.5 GGUF with an MTP head, as a sparse file: full metadata, no weight bytes.

    python bench/sparse_source.py OUT.gguf [--dense]

The header, every key a Qwen3.5-27B GGUF carries (its 248,320-token byte-level BPE
vocabulary with merges included) and every tensor's info are written for real; the
tensor data region is a hole (`truncate`), so the file claims ~15 GB and occupies a few
megabytes. The metadata verbs (`inspect`, `check SPEC`, `plan`, `diff`) must answer from
the header alone, so this is what they are timed on. `--dense` fills the data with
pseudo-random bytes instead (a real 15 GB file for the keep: source compile benchmark;
its Q4_0/Q8_0 scales are random float16 bits, so the values are nonsense but the bytes
are real and must be read).

Shapes follow Qwen3.5-27B's config.json: hidden 5120, 64 layers (3 linear-attention to 1
full), intermediate 17408, 24 heads x 256 over 4 KV heads, 16 key / 48 value linear heads
x 128, vocab 248,320, one MTP layer. Projections Q4_0 (Q8_0 for eh_proj, alpha and beta,
as in real MTP GGUFs), norms F32, embedding and output Q8_0.
"""

from __future__ import annotations

import argparse
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
from mtpc.weights import canonical_shapes  # noqa: E402
from tests.fixtures.gguf_writer import MIXED_TYPES, _bytes_to_unicode, add_metadata, gguf_name  # noqa: E402

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
    total = 0
    for canonical, shape in sorted(canonical_shapes(arch).items()):
        name = gguf_name(canonical, arch.num_layers)
        shape = gguf_shape(canonical, shape)
        qtype = next((t for p, t in TYPES if fnmatchcase(name, p)), QT.F32) if len(shape) > 1 else QT.F32
        block, type_size = GGML_QUANT_SIZES[qtype]
        byte_shape = (*shape[:-1], shape[-1] // block * type_size)
        nbytes = int(np.prod(byte_shape))
        if qtype == QT.F32:
            w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes)
        else:  # gguf-py takes a quantized tensor's shape in bytes
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes, raw_dtype=qtype)
        total += nbytes
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--dense", action="store_true", help="write real (pseudo-random) data bytes: ~15 GB")
    args = parser.parse_args()
    path = write(args.out, architecture_27b(), dense=args.dense)
    print(f"{path}: {path.stat().st_size / 1e9:.1f} GB claimed, {os.stat(path).st_blocks * 512 / 1e6:.1f} MB on disk")


if __name__ == "__main__":
    main()
