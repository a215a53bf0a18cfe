"""The model card's measured-speed section, from a `mtpc tune` report (`compile --tune-report FILE`).

Pure: the section is made from the report's numbers alone (loaded by
`mtpc.tuning.report.load_report`), never from a measurement at compile time, so the
same report gives the same card bytes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpeedRow:
    draft: int
    tokens_per_second: float
    speedup: float
    accepted: int
    proposed: int


@dataclass(frozen=True)
class SpeedTable:
    """What the card shows of a tune report."""

    rows: tuple[SpeedRow, ...]
    acceptance: tuple[tuple[int, int, int], ...]  # (position, tried, accepted)
    recommended: int
    spec_line: str
    mtpc: str
    runtime: str  # "onnxruntime-genai 0.18.0 with onnxruntime 1.32.0"
    threads: int | None
    cpu: str
    cores: int
    prompts: int
    prompts_source: str
    generated_tokens: int
    # Which package the numbers are of (checked against the one compiled: `tuning.report.check_report_fits`).
    source_sha256: str | None
    weights_sha256: str | None


def _rate(value: float) -> str:
    """Three significant digits, written the same way on every machine."""
    return f"{value:.3g}" if value < 999.5 else f"{value:.0f}"


def _percent(accepted: int, tried: int) -> str:
    return f"{100 * accepted / tried:.0f} %" if tried else "–"


def render_speed_section(table: SpeedTable) -> list[str]:
    threads = f"{table.threads} thread{'s' if table.threads != 1 else ''}" if table.threads else "the package's own threads"
    source = "built-in prompts" if table.prompts_source == "built-in" else f"prompts from `{table.prompts_source}`"
    lines = [
        "",
        "## Decoding speed with MTP",
        "",
        f"Measured by `mtpc tune` (mtpc {table.mtpc}, {table.runtime}, {threads}) on {table.cpu} "
        f"({table.cores} core{'s' if table.cores != 1 else ''}): {table.prompts} {source}, "
        f"{table.generated_tokens} generated tokens. Tokens per second are predicted from the measured cost of each "
        "decoding step and where the head's drafts were right; greedy decoding, the same tokens for every row.",
        "",
        "| drafts per step | tokens/s | vs MTP off | drafts accepted |",
        "|---|---|---|---|",
    ]
    for row in table.rows:
        name = "0 (MTP off)" if row.draft == 0 else str(row.draft)
        mark = " (recommended)" if row.draft == table.recommended else ""
        accepted = _percent(row.accepted, row.proposed) if row.draft else "–"
        lines.append(f"| {name}{mark} | {_rate(row.tokens_per_second)} | {row.speedup:.2f}x | {accepted} |")
    positions = ", ".join(f"draft {k}: {_percent(kept, tried)}" for k, tried, kept in table.acceptance)
    lines += [
        "",
        f"Accepted where the drafts before it were: {positions}.",
        "",
        f"Recommended for this machine: `{table.spec_line}` in the spec"
        + (" (MTP off: the head costs more than its drafts save here)." if table.recommended == 0 else "."),
        "Another machine, thread count or kind of prompt can change the answer: `mtpc tune DIR --prompts FILE` measures it.",
    ]
    return lines
