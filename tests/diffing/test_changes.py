"""Path-addressed diffs: what changed, where, in a stable order."""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass

from mtpc.diffing.changes import ADDED, ByName, CHANGED, Change, REMOVED, diff_values, sorted_changes, summary, to_plain
from mtpc.diffing.files import diff_files, directory_files


def rendered(changes):
    return [c.render() for c in sorted_changes(changes)]


def test_nested_dict_changes_are_addressed_by_path():
    old = {"model": {"decoder": {"hidden_size": 64, "head_size": 16}, "vocab_size": 256}}
    new = {"model": {"decoder": {"hidden_size": 128, "num_hidden_layers": 4}, "vocab_size": 256}}
    assert rendered(diff_values(old, new, "genai_config.json")) == [
        "- genai_config.json:/model/decoder/head_size (was 16)",
        "~ genai_config.json:/model/decoder/hidden_size: 64 -> 128",
        "+ genai_config.json:/model/decoder/num_hidden_layers = 4",
    ]


def test_named_list_items_match_by_name_not_position():
    old = {"inputs": [{"name": "a", "dtype": "int64"}, {"name": "b", "dtype": "float32"}]}
    reordered = {"inputs": [{"name": "b", "dtype": "float32"}, {"name": "a", "dtype": "int64"}]}
    assert diff_values(old, reordered) == []
    changed = {"inputs": [{"name": "b", "dtype": "float16"}, {"name": "c", "dtype": "int64"}, {"name": "a", "dtype": "int64"}]}
    changes = sorted_changes(diff_values(old, changed, "f"))
    assert [(c.pointer, c.kind) for c in changes] == [("/inputs[name=b]/dtype", CHANGED), ("/inputs[name=c]", ADDED)]
    assert changes[0].path == ("inputs", ByName("b"), "dtype")


def test_unnamed_lists_compare_by_index():
    assert rendered(diff_values({"eos": [2, 3]}, {"eos": [2, 4, 5]}, "x")) == [
        "~ x:/eos/1: 3 -> 4",
        "+ x:/eos/2 = 5",
    ]


def test_a_bool_is_not_the_number_one():
    assert [c.kind for c in diff_values({"k": True}, {"k": 1})] == [CHANGED]
    assert diff_values({"k": 1.0}, {"k": 1.0}) == []


def test_order_is_stable_whatever_the_insertion_order():
    a = {f"k{i}": i for i in range(12)}
    b = {f"k{i}": i + 1 for i in reversed(range(12))}
    paths = [c.pointer for c in sorted_changes(diff_values(a, b))]
    assert paths == sorted(paths)
    # integer indices sort numerically, not as text
    many = sorted_changes(diff_values({"l": list(range(12))}, {"l": [x + 1 for x in range(12)]}))
    assert [c.path[-1] for c in many] == list(range(12))


def test_pointer_escapes_slashes_and_tildes():
    assert Change("f", ("a/b", "c~d"), CHANGED, 1, 2).pointer == "/a~1b/c~0d"


def test_summary_counts_by_kind_and_file():
    changes = [Change("a", ("x",), ADDED, new=1), Change("a", ("y",), REMOVED, old=1), Change("b", (), CHANGED, "h1", "h2")]
    assert summary(changes) == "3 differences in 2 files: 1 added, 1 removed, 1 changed"
    assert summary([]) == "no differences"


class Color(str, enum.Enum):
    RED = "red"


@dataclass(frozen=True)
class Leaf:
    name: str
    color: Color
    names: tuple[tuple[str, str], ...] = ()


def test_ir_to_plain_turns_pair_tuples_into_mappings():
    plain = to_plain(Leaf("x", Color.RED, (("input_ids", "ids"), ("logits", "out"))))
    assert plain == {"name": "x", "color": "red", "names": {"input_ids": "ids", "logits": "out"}}
    assert json.dumps(plain)  # JSON-ready


def test_directories_structured_files_by_path_binaries_by_hash(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        (d / "mtp").mkdir(parents=True)
    (a / "genai_config.json").write_text(json.dumps({"model": {"vocab_size": 256, "type": "t"}}))
    (b / "genai_config.json").write_text(json.dumps({"model": {"type": "t", "vocab_size": 512}}, indent=4))
    (a / "inference_metadata.yaml").write_text("model: {vocab_size: 256}\n")
    (b / "inference_metadata.yaml").write_text("model:\n  vocab_size: 256\n")  # same document, other bytes
    (a / "model.onnx.data").write_bytes(b"\x00\x01")
    (b / "model.onnx.data").write_bytes(b"\x00\x02")
    (a / "mtp" / "old.bin").write_bytes(b"x")
    (b / "README.md").write_text("hi")
    changes = diff_files(directory_files(a), directory_files(b))
    h = lambda data: "sha256:" + hashlib.sha256(data).hexdigest()  # noqa: E731
    assert [(c.file, c.pointer, c.kind) for c in changes] == [
        ("README.md", "/", ADDED),
        ("genai_config.json", "/model/vocab_size", CHANGED),
        ("model.onnx.data", "/", CHANGED),
        ("mtp/old.bin", "/", REMOVED),
    ]
    assert changes[1].render() == "~ genai_config.json:/model/vocab_size: 256 -> 512"
    assert (changes[2].old, changes[2].new) == (h(b"\x00\x01"), h(b"\x00\x02"))
    assert summary(changes) == "4 differences in 4 files: 1 added, 1 removed, 2 changed"


def test_identical_directories_have_no_differences(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "genai_config.json").write_text('{"model": {}}')
    assert diff_files(directory_files(tmp_path / "a"), directory_files(tmp_path / "b")) == []


def test_an_empty_mapping_field_of_the_ir_stays_a_mapping():
    """`heads` with no heads must diff key by key against heads, not as [] -> {...}."""
    from dataclasses import replace

    from mtpc.diffing.changes import to_plain
    from tests.passes.ir_factory import compiled

    with_heads = compiled()
    without = replace(with_heads, heads=())
    assert isinstance(to_plain(with_heads)["heads"], dict) and to_plain(with_heads)["heads"]
    assert to_plain(without)["heads"] == {}


def _plain_reference(value):
    """`to_plain` as first written: field by field through `dataclasses.fields`, no shortcuts."""
    import dataclasses
    import enum
    import hashlib

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        irrelevant = value.irrelevant_fields() if hasattr(value, "irrelevant_fields") else frozenset()
        out = {}
        for f in dataclasses.fields(value):
            if f.repr and f.name not in irrelevant:
                v = getattr(value, f.name)
                out[f.name] = {} if v == () and str(f.type).startswith("tuple[tuple[") else _plain_reference(v)
        return out
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        if value and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], (str, enum.Enum)) for p in value):
            keys = [_plain_reference(p[0]) for p in value]
            if len(set(keys)) == len(keys):
                return {k: _plain_reference(p[1]) for k, p in zip(keys, value)}
        return [_plain_reference(v) for v in value]
    if isinstance(value, bytes):
        return "sha256:" + hashlib.sha256(value).hexdigest()
    return value


def test_to_plain_of_every_shipped_specs_ir_is_the_field_by_field_walk():
    import json
    from pathlib import Path

    from mtpc.pipeline.driver import build_ir

    repo = Path(__file__).resolve().parents[2]
    for spec in sorted((repo / "specs").glob("*.yaml")) + sorted((repo / "tests" / "cases" / "valid").glob("*.yaml")):
        ir, _ = build_ir(spec)
        ours, reference = to_plain(ir), _plain_reference(ir)
        assert json.dumps(ours) == json.dumps(reference), spec.name  # same values, same key order


# ----------------------------------------------------------------------------- equal parts told in C

from hypothesis import given, settings, strategies as st  # noqa: E402

import mtpc.diffing.changes as diffing_module  # noqa: E402

_LEAVES = st.sampled_from([0, 1, True, False, 1.0, -0.0, 0.0, float("nan"), None, "", "a", "1", "nan", (1, 2), (True,)])
_TREES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "name", "shape"]), inner, max_size=3)
    | st.lists(st.fixed_dictionaries({"name": st.sampled_from(["x", "y", "z"]), "v": inner}), max_size=3),
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(_TREES, _TREES, st.booleans())
def test_equal_parts_skipped_in_c_give_the_walks_own_changes(old, new, share):
    """`_same` cuts the walk short where it would find nothing: True vs 1, 1.0 vs 1, NaN (changed even from
    itself) and -0.0 vs 0.0 come out as the walk alone says."""
    if share:  # the same part on both sides, as two IRs of one model hold
        new = [old, new]
        old = [old, old]
    fast = diff_values(old, new, "f")
    original = diffing_module._same
    diffing_module._same = lambda a, b: False
    try:
        slow = diff_values(old, new, "f")
    finally:
        diffing_module._same = original
    key = lambda c: (repr(c.path), c.kind, repr(c.old), repr(c.new))  # noqa: E731
    assert sorted(map(key, fast)) == sorted(map(key, slow))


# ----------------------------------------------------------------------------- dataclass trees diffed by field


def _key(c):
    return (repr(c.path), c.kind, repr(c.old), repr(c.new))


def _as_walk(old, new):
    """What `diff_trees` must give: the walk over both trees made plain, less what is under a field that is the
    very same object on both sides (a NaN there, which the walk over two plain copies calls changed even from
    itself, and nothing else)."""
    import dataclasses

    walk = diff_values(to_plain(old), to_plain(new), "f")
    same = {f.name for f in dataclasses.fields(old) if getattr(old, f.name) is getattr(new, f.name)
            and type(getattr(old, f.name)) not in (int, float, str, bool, type(None))}
    assert all("nan" in repr(c.old) for c in walk if c.path[0] in same)
    return sorted(_key(c) for c in walk if c.path[0] not in same)


@dataclass(frozen=True)
class _Leafy:
    x: object = 0
    pairs: tuple[tuple[str, object], ...] = ()
    items: tuple = ()


@dataclass(frozen=True)
class _Choosy:
    """A value naming fields that mean nothing in its state, as QuantScheme does."""

    on: bool = False
    size: object = 1

    def irrelevant_fields(self):
        return frozenset() if self.on else frozenset({"size"})


@dataclass(frozen=True)
class _Root:
    a: object = None
    leafy: object = None
    choosy: object = None


_VALUES = st.deferred(lambda: _LEAVES | st.builds(_Leafy, _LEAVES, st.lists(st.tuples(st.sampled_from("pq"), _LEAVES),
                                                                            max_size=2).map(tuple),
                                                  st.lists(_LEAVES, max_size=2).map(tuple))
                      | st.builds(_Choosy, st.booleans(), _LEAVES))
_ROOTS = st.builds(_Root, _VALUES, _VALUES, _VALUES)


@settings(max_examples=500, deadline=None)
@given(_ROOTS, _ROOTS, st.booleans())
def test_dataclass_trees_diffed_field_by_field_give_the_walks_changes(old, new, share):
    from dataclasses import replace

    from mtpc.diffing.changes import diff_trees

    if share:  # most fields the same objects, as in two IRs of one model
        new = replace(old, a=new.a)
    assert sorted(map(_key, diff_trees(old, new, "f"))) == _as_walk(old, new)


def test_every_pair_of_shipped_specs_irs_diffs_field_by_field_as_the_walk():
    from dataclasses import replace
    from pathlib import Path

    from mtpc.diffing.changes import diff_trees
    from mtpc.ir import Targets
    from mtpc.pipeline.driver import build_ir

    repo = Path(__file__).resolve().parents[2]
    irs = [build_ir(spec)[0] for spec in sorted((repo / "specs").glob("*.yaml"))]
    first = irs[0]
    arch = first.architecture
    irs += [
        replace(first, architecture=replace(arch, rms_norm_eps=int(1)), spec_path=None),  # 1 against 1e-6
        replace(first, architecture=replace(arch, rope=replace(arch.rope, theta=int(arch.rope.theta)))),  # 1e4 vs 1e4.0
        replace(first, architecture=replace(arch, rms_norm_eps=float("nan"))),
        replace(first, architecture=replace(arch, tie_word_embeddings=0)),  # False against 0
        replace(first, targets=Targets(), heads=()),
        replace(first, weights=first.weights[::-1]),
        replace(first, quantization=replace(first.quantization, default=replace(first.quantization.default, bits=8))),
    ]
    for old in irs:
        for new in irs:
            assert sorted(map(_key, diff_trees(old, new, "f"))) == _as_walk(old, new)
