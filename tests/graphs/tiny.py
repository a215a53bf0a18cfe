"""Tiny IRs and an in-memory emit for the graph tests: IRs built directly (no spec file; the paged variant
through `passes.paged_io.packed_decoder`), and helpers to run the graphs on onnxruntime CPU."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from mtpc.ir.contracts import main_decoder_config, onnx_genai_head_contract, ort_head_contract
from mtpc.emit.artifact import EmitContext, Progress
from mtpc.emit.artifact import Artifact
from mtpc.emit.onnx_graphs import emit_onnx_graphs
from mtpc.ir import (
    Architecture,
    DecoderConfig,
    HeadContract,
    ModelIR,
    MtpSettings,
    Precision,
    QuantForm,
    QuantizationPlan,
    SeedHidden,
    SourceRef,
    SourceTensor,
    Targets,
)
from mtpc.output.write import write_package
from mtpc.passes.paged_io import packed_decoder
from mtpc.passes.quantization import QuantizationPlanning
from mtpc.sources.info import SourceInfo

ORT_HEAD_FILE = "mtp/mtp.onnx"
ONNX_GENAI_HEAD_FILE = "mtp_sidecar/mtp_sidecar.onnx"


def head_config(arch: Architecture, precision: Precision, kind: HeadContract) -> DecoderConfig:
    main = main_decoder_config(arch, precision)
    if kind is HeadContract.ORT_GENAI:
        contract, filename = ort_head_contract(arch, precision), ORT_HEAD_FILE
        inputs = {"input_ids": "input_ids", "hidden_states": "hidden_states", "attention_mask": "attention_mask",
                  "position_ids": "position_ids", "past_key_names": "past_key_values.%d.key",
                  "past_value_names": "past_key_values.%d.value"}
        outputs = {"logits": "logits", "hidden_states": "hidden_states_out",
                   "present_key_names": "present.%d.key", "present_value_names": "present.%d.value"}
    else:
        contract, filename = onnx_genai_head_contract(arch, precision), ONNX_GENAI_HEAD_FILE
        inputs = {"inputs_embeds": "inputs_embeds", "hidden_states": "hidden_states",
                  "attention_mask": "attention_mask", "position_ids": "position_ids",
                  "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"}
        outputs = {"hidden_states": "mtp_hidden", "present_key_names": "present.%d.key",
                   "present_value_names": "present.%d.value"}
    return replace(main, filename=filename, layer_kinds=(arch.layer_kinds[arch.attention_layers[0]],),
                   inputs=tuple(inputs.items()), outputs=tuple(outputs.items()), contract=contract, conv_kernel=0)


def make_ir(
    arch: Architecture,
    *,
    io_dtype: str = "float32",
    logits_dtype: str | None = None,
    quantization: QuantizationPlan = QuantizationPlan(),
    heads: tuple[HeadContract, ...] = (HeadContract.ORT_GENAI, HeadContract.ONNX_GENAI),
    paged: bool = False,
    seed_hidden: SeedHidden = SeedHidden.POST_NORM,
) -> ModelIR:
    precision = Precision(io_dtype=io_dtype, logits_dtype=logits_dtype)
    main = main_decoder_config(arch, precision)
    head_cfgs = tuple((kind, head_config(arch, precision, kind)) for kind in heads)
    if paged:
        main = packed_decoder(main)
        head_cfgs = tuple((k, packed_decoder(c) if k is HeadContract.ORT_GENAI else c) for k, c in head_cfgs)
    return ModelIR(
        name="tiny",
        spec_path=None,
        source=SourceRef("synthetic", seed=0),
        architecture=arch,
        mtp=MtpSettings(seed_hidden=seed_hidden, emit_head=bool(heads)),
        precision=precision,
        quantization=quantization,
        targets=Targets(),
        main=main,
        heads=head_cfgs,
    )


def emit(
    ir: ModelIR, store, out_dir: Path | None = None, progress: Progress = lambda message: None
) -> tuple[list[Artifact], EmitContext]:
    """Emit the graphs; with `out_dir`, also write them there (streaming the data files)."""
    ctx = EmitContext(SourceInfo(ir.architecture), lambda: store, progress)
    artifacts = emit_onnx_graphs(with_weight_table(ir, store), ctx)
    if out_dir is not None:
        write_package(artifacts, out_dir)
    return artifacts, ctx


def session(path: Path):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def run(sess, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def empty_state(sess, batch: int) -> dict[str, np.ndarray]:
    """Zero-length KV and zero conv / recurrent state for every state input of a dense graph."""
    dtypes = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
    out = {}
    for i in sess.get_inputs():
        if i.name.startswith(("past_key_values.", "past.")):
            shape = [batch if d == "batch_size" else 0 if isinstance(d, str) else d for d in i.shape]
            out[i.name] = np.zeros(shape, dtypes[i.type])
    return out


def presents_as_past(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Feed a step's present.* outputs back as the next step's past inputs."""
    past = {}
    for name, value in outputs.items():
        if name.startswith("present."):
            _, layer, kind = name.split(".")
            past[f"past_key_values.{layer}.{kind}" if kind in ("key", "value") else f"past.{layer}.{kind}"] = value
    return past


ONNX_DTYPE_NAMES = {1: "float32", 10: "float16", 16: "bfloat16", 7: "int64", 6: "int32"}


def graph_io(values) -> list[tuple[str, str, tuple]]:
    """(name, dtype, shape) of graph inputs or outputs, in order, as a contract writes them."""
    return [(v.name, ONNX_DTYPE_NAMES[v.type.tensor_type.elem_type],
             tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in v.type.tensor_type.shape.dim))
            for v in values]


def contract_io(specs) -> list[tuple[str, str, tuple]]:
    return [(t.name, t.dtype, tuple(t.shape)) for t in specs]


def with_weight_table(ir: ModelIR, store) -> ModelIR:
    """`ir` with the weight table the quantization pass makes from `store`'s tensors, as lowering would."""
    tensors = []
    for name in store.names():
        info = store.info(name)
        carried = None
        if info.quantized:
            carried = QuantForm(info.bits, info.block_size, info.has_zero_points, info.float_zero_points, info.block_offsets)
        tensors.append(SourceTensor(name, tuple(info.shape), info.dtype, carried))
    return QuantizationPlanning()(replace(ir, source_tensors=tuple(tensors))).ir
