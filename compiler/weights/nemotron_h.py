"""The canonical tensors of Nemotron-H's own blocks (`weights.shapes.canonical_shapes` asks here): the Mamba2
mixer (`ir/mamba.py`) and the relu² MoE block with LatentMoE (`ir/moe.py`).

A Mamba2 layer holds `mamba.in_proj.weight` (rows `[z | xBC | dt]`), `mamba.conv1d.{weight,bias}`, `mamba.dt_bias`,
`mamba.decay_scale` (`-exp(A_log)`), `mamba.D`, `mamba.norm.weight` (the gated norm's, applied per group) and
`mamba.out_proj.weight`; the relu² block has no gate projections; every Nemotron-H layer has one norm
(`input_layernorm`)."""

from __future__ import annotations

from ..ir import Mamba2Dims, MoeDims


def mamba2_shapes(prefix: str, hidden: int, m: Mamba2Dims) -> dict[str, tuple[int, ...]]:
    """The canonical tensors of one Mamba2 mixer under `prefix` (`ir/mamba.py`): in_proj's rows [z | xBC | dt],
    `decay_scale` = -exp(A_log), the gated norm's weight over all H*P channels (applied per group)."""
    p = prefix + "mamba."
    shapes: dict[str, tuple[int, ...]] = {
        p + "in_proj.weight": (m.in_proj_rows, hidden),
        p + "conv1d.weight": (m.conv_dim, 1, m.conv_kernel),
        p + "dt_bias": (m.num_heads,),
        p + "decay_scale": (m.num_heads,),
        p + "D": (m.num_heads,),
        p + "norm.weight": (m.inner_size,),
        p + "out_proj.weight": (hidden, m.inner_size),
    }
    if m.conv_bias:
        shapes[p + "conv1d.bias"] = (m.conv_dim,)
    return shapes


def relu2_moe_shapes(p: str, hidden: int, moe: MoeDims) -> dict[str, tuple[int, ...]]:
    """Nemotron-H's sparse block under `p` (`<layer>.mlp.`): non-gated experts (up, down) in the latent width
    with LatentMoE (`fc1_latent_proj` / `fc2_latent_proj` around them), a non-gated shared expert."""
    e, i, s = moe.num_experts, moe.expert_intermediate_size, moe.shared_expert_intermediate_size
    width = moe.latent_size or hidden
    shapes = {
        p + "gate.weight": (e, hidden),
        p + "experts.up_proj.weight": (e, i, width),
        p + "experts.down_proj.weight": (e, width, i),
        p + "shared_expert.up_proj.weight": (s, hidden),
        p + "shared_expert.down_proj.weight": (hidden, s),
    }
    if moe.latent_size:
        shapes.update({p + "fc1_latent_proj.weight": (moe.latent_size, hidden),
                       p + "fc2_latent_proj.weight": (hidden, moe.latent_size)})
    if moe.selection_bias:
        shapes[p + "gate.e_score_correction_bias"] = (e,)
    return shapes
