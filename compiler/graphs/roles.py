"""Graph names of a decoder config's roles, as the builders read them.

The DecoderConfig is the only source of names: a role a builder needs and the
config lacks is a bug in lowering or a pass, not a user mistake.
"""

from __future__ import annotations

from ..ir import DecoderConfig


def input_name(cfg: DecoderConfig, role: str, layer: int | None = None) -> str:
    """The graph input `cfg` names for `role` (a per-layer `%d` template filled with `layer`)."""
    return _fill(cfg, role, cfg.input_name(role), "input", layer)


def output_name(cfg: DecoderConfig, role: str, layer: int | None = None) -> str:
    """The graph output `cfg` names for `role` (a per-layer `%d` template filled with `layer`)."""
    return _fill(cfg, role, cfg.output_name(role), "output", layer)


def _fill(cfg: DecoderConfig, role: str, template: str | None, direction: str, layer: int | None) -> str:
    if template is None:
        raise AssertionError(f"{cfg.filename}: the decoder config names no {direction} for role {role!r}")
    return template % layer if layer is not None else template
