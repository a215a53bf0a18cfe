"""The vision graph (`vision.onnx`) and the embedding graph (`embedding.onnx`) of onnxruntime-genai's
multimodal pipeline, to the contracts `ir/vision.py`'s pipeline holds (`passes/vision.py` makes them).

The vision graph takes every image of a prompt in one run, as the runtime's processor hands them over:
`pixel_values [P, C*T*p*p]` and `image_grid_thw [N, 3]`. With two or more images of different sizes
onnxruntime-genai 0.18.0's processor pads each image's block of patches to the largest image's count
(measured: a 4x4 grid then a 6x8 one arrive as 96 rows, the first image's 16 followed by 32 zero rows);
the graph reads image i's rows from `i * max(t*h*w)` when the row count says so (P != sum(t*h*w)), from
the running sum of the counts otherwise. The runtime's own per-image loop (`QwenVisionState::Run`,
src/models/multi_modal.cpp) slices at the running sum and would read the padding as the second image, so
the package's config leaves `vision.inputs.image_grid_thw` unset and the runtime runs this graph once
(`passes/vision.py`).

Per patch, in order: the patch embedding (the Conv3d as a linear), the learned position table resampled
bilinearly to the image's grid (align_corners, border clamp), 2-D rotary from the patch's (row, column) in
merge-block order, `depth` pre-LayerNorm blocks with attention within each frame (a block-diagonal mask:
no attention across images) and a GELU-tanh MLP, then the merger (LayerNorm, each merge x merge block's
patches side by side through a GELU MLP). Positions, rotation and attention scores are float32 whatever
the tower's dtype, as transformers computes them; so are the residual stream, the norms and the features
handed to the embedding graph, while the projections run in the tower's dtype: a float16 tower then stays
within 1e-3 of transformers' float32 features (transformers' own float16 tower: 2.7e-3 on the test fixture,
whose features reach 2.1, where float16's spacing is 2e-3).

The embedding graph looks up the token embeddings and puts the image features, in order, on the image
tokens' rows; on decode steps the runtime passes zero feature rows.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as oir

from ..ir import ModelIR
from ..ir.contracts import EMBEDDING_INITIALIZER
from ..ir.vision import MERGE_SIZE_KEY, PATCH_SIZE_KEY, TEMPORAL_PATCH_KEY, VisionTower
from .blocks import cast, embed, initializer_name, linear, linear_stem
from .builder import BuiltGraph, GraphBuilder, GraphData
from .parameters import ParameterSource

F32, I64 = oir.DataType.FLOAT, oir.DataType.INT64


def build_vision(ir: ModelIR, params: ParameterSource, data: GraphData) -> BuiltGraph:
    assert ir.architecture.vision is not None and ir.vision is not None
    tower = ir.architecture.vision.tower
    contract = ir.vision.vision
    b = GraphBuilder("vision", params, data)
    b.declare_inputs(contract)
    pixels_in, grid = (b.inputs[t.name] for t in contract.inputs)
    with b.scope("patches"):
        layout = _patch_layout(b, pixels_in, grid, tower)
    with b.scope("patch_embed"):
        x = _affine(b, cast(b, layout.pixels, b.io_dtype, "Cast", F32), "visual.patch_embed.proj")
        x = cast(b, x, F32, "Cast_stream", b.io_dtype)
    with b.scope("pos_embed"):
        x = b.op("Add", [x, _position_embedding(b, layout, tower)], name="Add")
    with b.scope("rotary"):
        cos, sin = _rotary(b, layout, tower)
    with b.scope("attention_mask"):
        same = b.op("Equal", [b.op("Unsqueeze", [layout.segment, b.i64("axis_1", [1])], name="Unsqueeze_q"),
                              b.op("Unsqueeze", [layout.segment, b.i64("axis_0", [0])], name="Unsqueeze_k")],
                    name="Equal")
        mask = b.op("Where", [same, b.constant("zero", np.asarray(0.0, np.float32)),
                              b.constant("minus_inf", np.asarray(-np.inf, np.float32))], name="Where")
    for i in range(tower.depth):
        with b.scope(f"blocks.{i}"):
            x = _block(b, x, f"visual.blocks.{i}.", tower, cos, sin, mask)
    with b.scope("merger"):
        h = _layer_norm(b, x, "visual.merger.norm", 1e-6, "norm")
        h = b.op("Reshape", [h, b.i64("merged_shape", [-1, tower.merged_width])], name="Reshape")
        h = _gelu(b, _affine(b, h, "visual.merger.linear_fc1"), "none", "act")
        h = _affine(b, h, "visual.merger.linear_fc2", float32=True)
    out = contract.outputs[0]
    built = b.finish(contract, {out.name: cast(b, h, _onnx(out.dtype), "output/Cast", b.io_dtype)})
    built.model.metadata_props.update({PATCH_SIZE_KEY: str(tower.patch_size),
                                       MERGE_SIZE_KEY: str(tower.spatial_merge_size),
                                       TEMPORAL_PATCH_KEY: str(tower.temporal_patch_size)})
    return built


def build_embedding(ir: ModelIR, params: ParameterSource, data: GraphData) -> BuiltGraph:
    assert ir.architecture.vision is not None and ir.vision is not None
    contract = ir.vision.embedding
    b = GraphBuilder("embedding", params, data)
    b.declare_inputs(contract)
    ids, features = (b.inputs[t.name] for t in contract.inputs)
    tokens = embed(b, ids, params.embedding("embed_tokens.weight", EMBEDDING_INITIALIZER))
    with b.scope("image_features"):
        is_image = b.op("Equal", [ids, b.i64("image_token_id", [ir.architecture.vision.tokens.image])], name="Equal")
        # Image token k (counting from 1 in reading order) takes feature row k of [zeros; features]; every
        # other token row 0, which also makes a decode step's empty feature block gatherable.
        flags = b.op("Cast", [is_image], {"to": I64}, name="Cast")
        order = b.op("CumSum", [b.op("Reshape", [flags, b.i64("flat", [-1])], name="Flatten"), b.i64("axis0", [0])],
                     name="CumSum")
        order = b.op("Reshape", [order, b.op("Shape", [ids], name="Shape")], name="Unflatten")
        rows = b.op("Mul", [order, flags], name="Mul")
        width = ir.architecture.hidden_size
        zero_row = b.constant("zero_row", np.zeros((1, width), b.io_dtype.numpy()))
        features = cast(b, features, b.io_dtype, "features/Cast", F32)
        table = b.op("Concat", [zero_row, features], {"axis": 0}, name="Concat")
        placed = b.op("Gather", [table, rows], {"axis": 0}, name="Gather")
        merged = b.op("Where", [b.op("Unsqueeze", [is_image, b.i64("axis_last", [-1])], name="Unsqueeze"), placed,
                                tokens], name="Where")
    out = contract.outputs[0]
    return b.finish(contract, {out.name: merged})


# ----------------------------------------------------------------------------- patch bookkeeping


class _Layout:
    """Per patch of the prompt's images (T of them, in reading order): its pixels and where it sits."""

    def __init__(self, pixels, h, w, row, col, segment):
        self.pixels, self.h, self.w, self.row, self.col, self.segment = pixels, h, w, row, col, segment


def _patch_layout(b: GraphBuilder, pixels: oir.Value, grid: oir.Value, tower: VisionTower) -> _Layout:
    m = tower.spatial_merge_size

    def column(i: int, name: str) -> oir.Value:
        return b.op("Gather", [grid, b.constant(f"column_{i}", np.asarray(i, np.int64))], {"axis": 1}, name=name)

    def op(kind: str, *inputs, name: str, **attrs) -> oir.Value:
        return b.op(kind, list(inputs), attrs or None, name=name)

    t, h, w = column(0, "t"), column(1, "h"), column(2, "w")
    hw = op("Mul", h, w, name="hw")
    counts = op("Mul", t, hw, name="counts")  # patches per image
    ends = op("CumSum", counts, b.i64("axis0", [0]), name="ends")
    starts = op("Sub", ends, counts, name="starts")
    total = op("ReduceSum", counts, b.i64("axes0", [0]), name="total", keepdims=0)
    rows_in = op("Gather", op("Shape", pixels, name="pixel_shape"), b.constant("dim0", np.asarray(0, np.int64)),
                 name="rows_in", axis=0)
    images = op("Gather", op("Shape", grid, name="grid_shape"), b.constant("dim0", np.asarray(0, np.int64)),
                name="images", axis=0)
    # onnxruntime-genai's processor pads every image's block to the largest image's count (see the module doc).
    largest = op("ReduceMax", counts, b.i64("axes0", [0]), name="largest", keepdims=0)
    padded = op("Not", op("Equal", rows_in, total, name="unpadded"), name="padded")
    index = op("Range", b.constant("zero_i64", np.asarray(0, np.int64)), images,
               b.constant("one_i64", np.asarray(1, np.int64)), name="image_index")
    block_starts = op("Where", padded, op("Mul", index, largest, name="padded_starts"), starts, name="block_starts")
    k = op("Range", b.constant("zero_i64", np.asarray(0, np.int64)), total, b.constant("one_i64", np.asarray(1, np.int64)),
           name="patch_index")
    # Which image patch k belongs to: how many images end at or before it.
    after = op("GreaterOrEqual", op("Unsqueeze", k, b.i64("axis_1", [1]), name="k_column"),
               op("Unsqueeze", ends, b.i64("axis_0", [0]), name="ends_row"), name="ended")
    image = op("ReduceSum", op("Cast", after, name="ended_count", to=I64), b.i64("axes1", [1]), name="image",
               keepdims=0)

    def per_patch(value: oir.Value, name: str) -> oir.Value:
        return op("Gather", value, image, name=name, axis=0)

    local = op("Sub", k, per_patch(starts, "patch_start"), name="local")  # index within its image
    source_rows = op("Add", per_patch(block_starts, "block_start"), local, name="source_rows")
    picked = op("Gather", pixels, source_rows, name="pixels", axis=0)
    ph, pw, phw = per_patch(h, "patch_h"), per_patch(w, "patch_w"), per_patch(hw, "patch_hw")
    within = op("Mod", local, phw, name="within")  # index within its frame
    frame = op("Div", local, phw, name="frame")
    # (row, column) in merge-block order: blocks row-major, each block's m x m patches row-major.
    mm = b.constant("m", np.asarray(m, np.int64))
    msq = b.constant("m2", np.asarray(m * m, np.int64))
    in_col = op("Mod", within, mm, name="in_col")
    in_row = op("Mod", op("Div", within, mm, name="within_m"), mm, name="in_row")
    blocks_w = op("Div", pw, mm, name="blocks_w")
    block = op("Div", within, msq, name="block")
    block_col = op("Mod", block, blocks_w, name="block_col")
    block_row = op("Div", block, blocks_w, name="block_row")
    row = op("Add", op("Mul", block_row, mm, name="block_row_m"), in_row, name="row")
    col = op("Add", op("Mul", block_col, mm, name="block_col_m"), in_col, name="col")
    # One attention segment per frame of each image (transformers' cu_seqlens).
    frame_starts = op("Sub", op("CumSum", t, b.i64("axis0", [0]), name="frames_end"), t, name="frame_starts")
    segment = op("Add", per_patch(frame_starts, "patch_frame_start"), frame, name="segment")
    return _Layout(picked, ph, pw, row, col, segment)


def _position_embedding(b: GraphBuilder, layout: _Layout, tower: VisionTower) -> oir.Value:
    """The learned `side x side` table resampled to the patch's image grid: bilinear, align_corners
    (grid index i maps to i * (side - 1) / (size - 1)), taps clamped to the table's border."""
    side = tower.grid_side
    (table,) = b.weights(b.params.tensor("visual.pos_embed.weight", initializer_name("visual.pos_embed.weight")))

    def axis(index: oir.Value, size: oir.Value, name: str) -> tuple[oir.Value, oir.Value, oir.Value]:
        fi = b.op("Cast", [index], {"to": F32}, name=f"{name}/Cast")
        span = b.op("Max", [b.op("Sub", [b.op("Cast", [size], {"to": F32}, name=f"{name}/size"),
                                         b.constant("one_f32", np.asarray(1.0, np.float32))], name=f"{name}/size_1"),
                           b.constant("one_f32", np.asarray(1.0, np.float32))], name=f"{name}/span")
        src = b.op("Div", [b.op("Mul", [fi, b.constant("side_1", np.asarray(side - 1, np.float32))], name=f"{name}/Mul"),
                           span], name=f"{name}/src")
        floor = b.op("Floor", [src], name=f"{name}/Floor")
        frac = b.op("Sub", [src, floor], name=f"{name}/frac")
        low = b.op("Cast", [floor], {"to": I64}, name=f"{name}/low")
        lo, hi = b.constant("zero_i64", np.asarray(0, np.int64)), b.constant("side_max", np.asarray(side - 1, np.int64))
        tap0 = b.op("Clip", [low, lo, hi], name=f"{name}/tap0")
        tap1 = b.op("Clip", [b.op("Add", [low, b.constant("one_i64", np.asarray(1, np.int64))], name=f"{name}/next"),
                             lo, hi], name=f"{name}/tap1")
        return tap0, tap1, frac

    r0, r1, fr = axis(layout.row, layout.h, "row")
    c0, c1, fc = axis(layout.col, layout.w, "col")
    one = b.constant("one_f32", np.asarray(1.0, np.float32))
    gr = {0: b.op("Sub", [one, fr], name="row/w0"), 1: fr}
    gc = {0: b.op("Sub", [one, fc], name="col/w0"), 1: fc}
    side_c = b.constant("side", np.asarray(side, np.int64))
    total = None
    for (i, r), (j, c) in ((x, y) for x in enumerate((r0, r1)) for y in enumerate((c0, c1))):
        idx = b.op("Add", [b.op("Mul", [r, side_c], name=f"tap{i}{j}/row"), c], name=f"tap{i}{j}/index")
        rows = cast(b, b.op("Gather", [table, idx], {"axis": 0}, name=f"tap{i}{j}/Gather"), F32, f"tap{i}{j}/Cast",
                    b.io_dtype)
        weight = b.op("Unsqueeze", [b.op("Mul", [gr[i], gc[j]], name=f"tap{i}{j}/weight"), b.i64("axis_last", [-1])],
                      name=f"tap{i}{j}/Unsqueeze")
        term = b.op("Mul", [rows, weight], name=f"tap{i}{j}/Mul")
        total = term if total is None else b.op("Add", [total, term], name=f"tap{i}{j}/Add")
    return total


def _rotary(b: GraphBuilder, layout: _Layout, tower: VisionTower) -> tuple[oir.Value, oir.Value]:
    """cos / sin `[T, 1, head_dim]` (float32): head_dim / 4 frequencies turned by the row, as many by the
    column, side by side, the whole repeated (rotate-half over the full head)."""
    spatial = tower.head_dim // 2
    inv_freq = (1.0 / tower.rope_theta ** (np.arange(0, spatial, 2, dtype=np.float64) / spatial)).astype(np.float32)
    inv = b.constant("inv_freq", inv_freq[None, :])
    parts = [b.op("Mul", [b.op("Unsqueeze", [b.op("Cast", [v], {"to": F32}, name=f"{n}/Cast"), b.i64("axis_1", [1])],
                               name=f"{n}/Unsqueeze"), inv], name=f"{n}/Mul")
             for v, n in ((layout.row, "row"), (layout.col, "col"))]
    freqs = b.op("Concat", parts + parts, {"axis": -1}, name="Concat")
    freqs = b.op("Unsqueeze", [freqs, b.i64("axis_1", [1])], name="Unsqueeze_heads")
    return b.op("Cos", [freqs], name="Cos"), b.op("Sin", [freqs], name="Sin")


# ----------------------------------------------------------------------------- blocks


def _onnx(dtype: str) -> oir.DataType:
    from .builder import ONNX_DTYPES

    return ONNX_DTYPES[dtype]


def _affine(b: GraphBuilder, x: oir.Value, prefix: str, *, float32: bool = False) -> oir.Value:
    """`x @ W^T + bias` of the tower's linear `prefix` (float or MatMulNBits, as the weight table says).

    `float32`: the product in float32 (a float weight of another dtype widened), for the features: float16's
    spacing at their magnitude (2e-3 above 2) would otherwise be their error."""
    local = prefix.rsplit(".", 1)[-1]
    params = b.params.linear(prefix + ".weight", linear_stem(prefix + ".weight"))
    if float32 and params.quant is None and b.io_dtype != F32:
        (w,) = b.weights(params.group)
        y = b.op("MatMul", [cast(b, x, F32, f"{local}/Cast_x", b.io_dtype), b.op("Cast", [w], {"to": F32}, name=f"{local}/Cast_w")],
                 name=f"{local}/MatMul")
        (bias,) = b.weights(b.params.tensor(prefix + ".bias", initializer_name(prefix + ".bias") + "_float32", dtype=F32))
        return b.op("Add", [y, bias], name=f"{local}/Add")
    y = linear(b, x, params, f"{local}/MatMul")
    (bias,) = b.weights(b.params.tensor(prefix + ".bias", initializer_name(prefix + ".bias")))
    return b.op("Add", [y, bias], name=f"{local}/Add")


def _layer_norm(b: GraphBuilder, x: oir.Value, prefix: str, eps: float, name: str) -> oir.Value:
    """LayerNorm of the float32 residual stream, its output in the tower's dtype for the projections after it."""
    (w,) = b.weights(b.params.tensor(prefix + ".weight", initializer_name(prefix + ".weight"), dtype=F32))
    (bias,) = b.weights(b.params.tensor(prefix + ".bias", initializer_name(prefix + ".bias"), dtype=F32))
    y = b.op("LayerNormalization", [x, w, bias], {"epsilon": eps, "axis": -1, "stash_type": 1}, name=name)
    return cast(b, y, b.io_dtype, f"{name}/Cast", F32)


def _gelu(b: GraphBuilder, x: oir.Value, approximate: str, name: str) -> oir.Value:
    """ONNX Gelu (opset 20), in float32."""
    y = b.op("Gelu", [cast(b, x, F32, f"{name}/Cast_in", b.io_dtype)], {"approximate": approximate}, name=f"{name}/Gelu")
    return cast(b, y, b.io_dtype, f"{name}/Cast_out", F32)


def _block(b: GraphBuilder, x: oir.Value, prefix: str, tower: VisionTower, cos: oir.Value, sin: oir.Value,
           mask: oir.Value) -> oir.Value:
    n, hd, eps = tower.num_heads, tower.head_dim, tower.layer_norm_eps
    h = _layer_norm(b, x, prefix + "norm1", eps, "norm1")
    with b.scope("attn"):
        qkv = _affine(b, h, prefix + "attn.qkv")
        qkv = b.op("Reshape", [qkv, b.i64("qkv_shape", [0, 3, n, hd])], name="qkv/Reshape")
        q, k, v = b.op_multi("Split", [qkv, b.i64("split_qkv", [1, 1, 1])], {"axis": 1}, name="qkv/Split",
                             num_outputs=3)
        squeeze = b.i64("axis_1", [1])
        q, k, v = (b.op("Squeeze", [t, squeeze], name=f"{nm}/Squeeze") for t, nm in ((q, "q"), (k, "k"), (v, "v")))
        q, k = (_rotate(b, cast(b, t, F32, f"{nm}/Cast", b.io_dtype), cos, sin, hd, nm) for t, nm in ((q, "q"), (k, "k")))
        v = cast(b, v, F32, "v/Cast", b.io_dtype)
        heads_first = {"perm": [1, 0, 2]}
        q, v = (b.op("Transpose", [t], heads_first, name=f"{nm}/Transpose") for t, nm in ((q, "q"), (v, "v")))
        k = b.op("Transpose", [k], {"perm": [1, 2, 0]}, name="k/Transpose")
        scores = b.op("MatMul", [q, k], name="scores/MatMul")
        scores = b.op("Mul", [scores, b.constant("scale", np.asarray(hd**-0.5, np.float32))], name="scores/Scale")
        probs = b.op("Softmax", [b.op("Add", [scores, mask], name="scores/Mask")], {"axis": -1}, name="Softmax")
        out = b.op("Transpose", [b.op("MatMul", [probs, v], name="out/MatMul")], heads_first, name="out/Transpose")
        out = b.op("Reshape", [out, b.i64("merged_heads", [0, n * hd])], name="out/Reshape")
        out = _affine(b, cast(b, out, b.io_dtype, "out/Cast", F32), prefix + "attn.proj")
    x = b.op("Add", [x, cast(b, out, F32, "attn/Cast", b.io_dtype)], name="attn/residual")
    h = _layer_norm(b, x, prefix + "norm2", eps, "norm2")
    with b.scope("mlp"):
        act = "tanh" if tower.hidden_act == "gelu_pytorch_tanh" else "none"
        h = _affine(b, _gelu(b, _affine(b, h, prefix + "mlp.linear_fc1"), act, "act"), prefix + "mlp.linear_fc2")
    return b.op("Add", [x, cast(b, h, F32, "mlp/Cast", b.io_dtype)], name="mlp/residual")


def _rotate(b: GraphBuilder, x: oir.Value, cos: oir.Value, sin: oir.Value, head_dim: int, name: str) -> oir.Value:
    """`x * cos + rotate_half(x) * sin` over the whole head (x `[T, heads, head_dim]`, float32)."""
    half = head_dim // 2
    with b.scope(f"{name}_rotary"):
        x1, x2 = b.op_multi("Split", [x, b.i64(f"split_{half}_{half}", [half, half])], {"axis": -1}, name="Split",
                            num_outputs=2)
        rotated = b.op("Concat", [b.op("Neg", [x2], name="Neg"), x1], {"axis": -1}, name="Concat")
        return b.op("Add", [b.op("Mul", [x, cos], name="cos"), b.op("Mul", [rotated, sin], name="sin")], name="Add")
