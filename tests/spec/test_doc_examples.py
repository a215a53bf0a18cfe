"""The YAML examples in README.md and docs/spec.md are specs that lower, so the docs cannot drift from the code."""

import re
from pathlib import Path

from mtpc.spec.loader import load_spec
from mtpc.spec.lower import lower
from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import write_gguf

REPO = Path(__file__).resolve().parents[2]


def yaml_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```yaml\n(.*?)^```", markdown, flags=re.S | re.M)


def test_the_readme_spec_lowers_with_a_gguf_in_place_of_its_model(tmp_path):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## A spec\n", 1)[1].split("\n## ", 1)[0]
    (example,) = yaml_blocks(section)
    write_gguf(tmp_path / "tiny.gguf", tiny_arch())
    spec, replaced = re.subn(r"(^\s*gguf:\s*)\S+", r"\g<1>tiny.gguf", example, count=1, flags=re.M)
    assert replaced == 1, "the README example no longer reads a gguf source"
    (tmp_path / "spec.yaml").write_text(spec, encoding="utf-8")
    ir, _ = lower(load_spec(tmp_path / "spec.yaml"))  # a finding raises MtpcError
    assert ir.source.kind == "gguf" and ir.architecture.mtp_num_layers == 1


def test_every_yaml_example_in_docs_spec_lowers(tmp_path):
    blocks = yaml_blocks((REPO / "docs" / "spec.md").read_text(encoding="utf-8"))
    starts_a_spec = lambda b: re.sub(r"\A(?:#.*\n)*", "", b).startswith("mtpc:")  # noqa: E731 (after comments)
    complete = [b for b in blocks if starts_a_spec(b)]
    fragments = [b for b in blocks if not starts_a_spec(b)]
    assert complete and fragments
    for i, block in enumerate(complete):
        (tmp_path / f"complete{i}.yaml").write_text(block, encoding="utf-8")
        lower(load_spec(tmp_path / f"complete{i}.yaml"))
    # A fragment shows one section: it must lower inside the minimal complete spec.
    for i, block in enumerate(fragments):
        (tmp_path / f"fragment{i}.yaml").write_text(complete[0] + block, encoding="utf-8")
        lower(load_spec(tmp_path / f"fragment{i}.yaml"))
