"""Runtime profiles: what one consumer version accepts and which quirks it has.

Emitters never hard-code what a runtime takes; they ask its profile. A profile
holds two kinds of knowledge:

- the keys each `genai_config.json` section accepts (the runtime's parser rejects
  unknown keys, so emitting one is fatal), with the JSON kind of each value;
- the runtime's quirks, each as data with a comment saying why it exists;
- the limits of a target's settings (`target_problems`), the one place they are
  stated: spec lowering reports them at the spec's lines, the runtime-profile
  pass re-checks IR built without a spec.

The profile type is `ort_genai.py`, one module per version (`ort_genai_0_18.py`, and
`ort_genai_0_17.py`, which shares 0.18.0's table and quirks); `ort_genai_profile(version)` picks
one. Each profile is tested against the real package of its version (tests/profiles/, run against
every supported release).
"""

from __future__ import annotations

from ..util.diagnostics import MtpcError
from .ort_genai import OrtGenaiProfile, major_minor


def ort_genai_profiles() -> tuple[OrtGenaiProfile, ...]:
    """Every onnxruntime-genai release mtpc has a profile for, oldest first."""
    from . import ort_genai_0_17, ort_genai_0_18

    return (ort_genai_0_17.PROFILE, ort_genai_0_18.PROFILE)


def ort_genai_profile(version: str) -> OrtGenaiProfile:
    """The profile for an onnxruntime-genai version ("0.18" or "0.18.0"; "0.17" or "0.17.1")."""
    known = {major_minor(p.version): p for p in ort_genai_profiles()}
    profile = known.get(major_minor(version))
    if profile is None:
        raise MtpcError.single(
            f"no runtime profile for onnxruntime_genai version {version!r}",
            hint=f"supported versions: {', '.join(p.version for p in ort_genai_profiles())}",
            path="targets.onnxruntime_genai.version",
        )
    return profile
