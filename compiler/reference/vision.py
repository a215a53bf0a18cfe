"""A numpy forward pass of Qwen3.5's vision tower and the multimodal prompt around it, for checking graphs.

Written from transformers 5.24's `modeling_qwen3_5.py` (`Qwen3_5VisionModel`, `Qwen3_5Model.get_rope_index`)
and `vision_utils.py` (the interpolation, position and cu_seqlens helpers), sharing nothing with
`graphs/vision.py`; float64 throughout, from the canonical weights (`visual.*`, the patch embedding as a
linear over the flattened patch).

- `VisionReference.features(pixel_values [P, C*T*p*p], grid_thw [N, 3])` -> merged features
  `[sum(t*h*w) / merge^2, out_hidden]`, the images' patches one after the other;
- `rope_index(input_ids, grid_thw, tokens, merge)` -> the prompt's 3-D MRoPE positions `[3, S]` and the
  delta later tokens add to their index;
- `merge_features(embeddings, input_ids, features, image_token)` -> the decoder's inputs_embeds.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.vision import VisionTokens, VisionTower
from ..weights import WeightStore
from .forward import _Weights


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":  # transformers' gelu_pytorch_tanh
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _block_order(h: int, w: int, merge: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of each patch of an h x w grid in the processor's order: merge x merge blocks row-major,
    each block's patches row-major (`get_vision_position_ids`)."""
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    shape = (h // merge, merge, w // merge, merge)
    return rows.reshape(shape).transpose(0, 2, 1, 3).ravel(), cols.reshape(shape).transpose(0, 2, 1, 3).ravel()


def _interpolation(h: int, w: int, merge: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    """Bilinear taps into the `side x side` position table (align_corners, border clamp) per patch of one
    frame: indices and weights `[h*w, 4]` (`get_vision_interpolation_indices_and_weights`)."""
    rows, cols = _block_order(h, w, merge)

    def axis(index: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        src = index * (side - 1) / max(size - 1, 1)
        floor = np.floor(src)
        taps = np.clip(floor[:, None] + np.array([0, 1]), 0, side - 1).astype(np.int64)
        weights = np.clip(1 - np.abs(src[:, None] - floor[:, None] - np.array([0, 1])), 0, None)
        return taps, weights

    r_taps, r_weights = axis(rows.astype(np.float64), h)
    c_taps, c_weights = axis(cols.astype(np.float64), w)
    indices = (r_taps[:, :, None] * side + c_taps[:, None, :]).reshape(-1, 4)
    weights = (r_weights[:, :, None] * c_weights[:, None, :]).reshape(-1, 4)
    return indices, weights


class VisionReference:
    def __init__(self, tower: VisionTower, store: WeightStore):
        self.tower = tower
        self._weights = _Weights(store)

    def __getitem__(self, name: str) -> np.ndarray:
        return self._weights[name]

    def _linear(self, x: np.ndarray, prefix: str) -> np.ndarray:
        return x @ self[prefix + ".weight"].T + self[prefix + ".bias"]

    def features(self, pixel_values: np.ndarray, grid_thw: np.ndarray) -> np.ndarray:
        tw = self.tower
        m, side = tw.spatial_merge_size, tw.grid_side
        x = self._linear(np.asarray(pixel_values, np.float64), "visual.patch_embed.proj")
        grids = [tuple(int(v) for v in g) for g in np.asarray(grid_thw).reshape(-1, 3)]
        pos, rows, cols, segments = [], [], [], []
        for t, h, w in grids:
            indices, weights = _interpolation(h, w, m, side)
            table = self["visual.pos_embed.weight"]
            frame = (table[indices] * weights[:, :, None]).sum(axis=1)
            r, c = _block_order(h, w, m)
            for _ in range(t):  # each frame attends to itself (cu_seqlens per frame)
                pos.append(frame)
                rows.append(r)
                cols.append(c)
                segments.append(h * w)
        x = x + np.concatenate(pos)
        cos, sin = self._rotary(np.concatenate(rows), np.concatenate(cols))
        bounds = np.concatenate([[0], np.cumsum(segments)])
        for i in range(tw.depth):
            p = f"visual.blocks.{i}."
            x = x + self._attention(layer_norm(x, self[p + "norm1.weight"], self[p + "norm1.bias"], tw.layer_norm_eps),
                                    p + "attn", cos, sin, bounds)
            h = layer_norm(x, self[p + "norm2.weight"], self[p + "norm2.bias"], tw.layer_norm_eps)
            act = "tanh" if tw.hidden_act == "gelu_pytorch_tanh" else "none"
            x = x + self._linear(gelu(self._linear(h, p + "mlp.linear_fc1"), act), p + "mlp.linear_fc2")
        # The merger: LayerNorm per patch, then each merge x merge block's patches side by side through its MLP.
        x = layer_norm(x, self["visual.merger.norm.weight"], self["visual.merger.norm.bias"], 1e-6)
        x = x.reshape(-1, tw.merged_width)
        return self._linear(gelu(self._linear(x, "visual.merger.linear_fc1"), "none"), "visual.merger.linear_fc2")

    def _rotary(self, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Axial 2-D rope: head_dim / 4 frequencies turned by the row, as many by the column, the two halves
        side by side and repeated over the head (`Qwen3_5VisionRotaryEmbedding`)."""
        spatial = self.tower.head_dim // 2
        inv_freq = 1.0 / self.tower.rope_theta ** (np.arange(0, spatial, 2, dtype=np.float64) / spatial)
        freqs = np.concatenate([rows[:, None] * inv_freq, cols[:, None] * inv_freq], axis=-1)
        freqs = np.concatenate([freqs, freqs], axis=-1)  # [P, head_dim]
        return np.cos(freqs), np.sin(freqs)

    def _attention(self, x: np.ndarray, prefix: str, cos: np.ndarray, sin: np.ndarray, bounds: np.ndarray) -> np.ndarray:
        tw = self.tower
        n, hd = tw.num_heads, tw.head_dim
        q, k, v = self._linear(x, prefix + ".qkv").reshape(len(x), 3, n, hd).transpose(1, 0, 2, 3)

        def rotate(t: np.ndarray) -> np.ndarray:
            half = hd // 2
            rotated = np.concatenate([-t[..., half:], t[..., :half]], axis=-1)
            return t * cos[:, None, :] + rotated * sin[:, None, :]

        q, k = rotate(q), rotate(k)
        out = np.zeros_like(q)
        for a, b in zip(bounds[:-1], bounds[1:]):  # full attention within each frame, none across
            scores = np.einsum("snd,tnd->nst", q[a:b], k[a:b]) / math.sqrt(hd)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs = scores / scores.sum(axis=-1, keepdims=True)
            out[a:b] = np.einsum("nst,tnd->snd", probs, v[a:b])
        return self._linear(out.reshape(len(x), n * hd), prefix + ".proj")


def rope_index(input_ids, grid_thw, tokens: VisionTokens, merge: int) -> tuple[np.ndarray, int]:
    """The prompt's MRoPE positions `[3, S]` and the delta a later token's index gains (`get_rope_index`):
    text tokens count on from the position after what precedes them, equal on all three rows; an image's
    tokens sit at (start, start + row, start + column) of its merged grid, and the text after it continues
    from start + max(merged rows, merged columns)."""
    ids = np.asarray(input_ids).ravel()
    grids = iter([tuple(int(v) for v in g) for g in np.asarray(grid_thw).reshape(-1, 3)] if grid_thw is not None else [])
    columns: list[np.ndarray] = []
    position, i = 0, 0
    while i < len(ids):
        if ids[i] != tokens.image:
            j = i
            while j < len(ids) and ids[j] != tokens.image:
                j += 1
            columns.append(np.broadcast_to(position + np.arange(j - i), (3, j - i)))
            position += j - i
            i = j
            continue
        t, h, w = next(grids)
        gh, gw = h // merge, w // merge
        tt, hh, ww = np.meshgrid(np.arange(t), np.arange(gh), np.arange(gw), indexing="ij")
        columns.append(np.stack([tt.ravel() + position, hh.ravel() + position, ww.ravel() + position]))
        i += t * gh * gw
        position += max(gh, gw)
    positions = np.concatenate(columns, axis=1)
    return positions, int(positions.max()) + 1 - len(ids)


def merge_features(embeddings: np.ndarray, input_ids, features: np.ndarray, image_token: int) -> np.ndarray:
    """The token embeddings `[B, S, H]` with the image tokens' rows replaced by the features, in order."""
    out = np.array(embeddings, dtype=np.float64, copy=True)
    mask = np.asarray(input_ids) == image_token
    if int(mask.sum()) != len(features):
        raise ValueError(f"{int(mask.sum())} image tokens, {len(features)} feature rows")
    out[mask] = features
    return out
