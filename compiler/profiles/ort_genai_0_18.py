"""onnxruntime-genai 0.18.0: the keys its `genai_config.json` parser accepts, and its quirks.

Facts measured with the 0.18.0 package (`og.Config(dir)` parses a config without
loading any graph); tests/profiles/test_ort_genai_parser.py re-checks every key
listed here against the installed runtime. The table lists what mtpc may emit,
not every key the runtime knows (multimodal, RNN, pipeline and drafter sections
are left out on purpose). 0.17.1 accepts the same table and has the same quirks
(ort_genai_0_17.py), so its profile shares them.
"""

from __future__ import annotations

from types import MappingProxyType

from ..ir import AttentionMode
from .ort_genai import OrtGenaiProfile

# mtpc sets none of these but provider_options (emit/genai_config.py): each session option tried
# measured no better than the runtime's own choice, in decode tok/s of a 512-wide 8-layer float32
# package on the 2-core machine: graph_optimization_level ORT_ENABLE_BASIC 0.87x onnxruntime's
# default ORT_ENABLE_ALL; intra_op_num_threads is the runtime's (one per core) unless the user sets
# it. "session.intra_op.allow_spinning": "0" was 1.65x (float32) and 2.1x (int4) at 2 threads, but
# on a machine loaded 4x over its cores, where spinning workers only steal time; 0.95x at 1 thread.
# An idle machine was not available to show it does not cost latency there, so it is left unset.
# Re-measured on the 156M bench checkpoint (bench/vs_builder.py --size medium), 2 threads, alternating
# fresh processes, medians of 4-6, load average 1.5-4.8 on the 2 cores: "0" gave int4 2.22x and fp32
# 1.63x wall tok/s (1.75x / 1.64x tokens per CPU-second; 2.09x for int4 with the decoding processes
# at nice -10), the builder's packages suffering the same spinning. Without spinning a worker sleeps between the parallel kernels of a step and is woken for
# each, which on an idle many-core machine costs latency; still unmeasured here, so still unset (on a
# shared machine, add "session.intra_op.allow_spinning": "0" to the package's session_options).
# past_present_share_buffer (search) stays false for dense dynamic caches (below): true made no
# difference on that checkpoint (0.89x vs 0.90x of the builder in the same run, 1 thread).
_SESSION_OPTIONS = {
    "log_id": "string",
    "enable_profiling": "string",
    "intra_op_num_threads": "int",
    "inter_op_num_threads": "int",
    "log_severity_level": "int",
    "log_verbosity_level": "int",
    "enable_cpu_mem_arena": "bool",
    "enable_mem_pattern": "bool",
    "graph_optimization_level": "string",
    "custom_ops_library": "string",
    "provider_options": "array",
}

_SHARED_INITIALIZER = {
    "name": "string",
    "data_file": "string",
    # Byte offsets and lengths are decimal strings; the parser rejects JSON numbers here.
    "offset": "string",
    "length": "string",
    "data_type": "int",
    "shape": "array",
}

_DECODER_INPUTS = (
    "input_ids",
    "inputs_embeds",
    "attention_mask",
    "position_ids",
    "past_key_names",
    "past_value_names",
    "past_key_scale_names",
    "past_value_scale_names",
    "past_conv_names",
    "past_recurrent_names",
    "cumulative_sequence_lengths",
    "past_sequence_lengths",
    "block_table",
    "block_table_windowed",
    "attention_metadata",
    "logits_indices",
    "state_update_capture_count",
    "state_update_active",
    "hidden_states",
)

_DECODER_OUTPUTS = (
    "logits",
    "present_key_names",
    "present_value_names",
    "present_key_scale_names",
    "present_value_scale_names",
    "present_conv_names",
    "present_recurrent_names",
    "state_update_conv_value_names",
    "state_update_recurrent_capsule_names",
    "hidden_states",
    "aux_hidden_states",
)

_KEYS = {
    # Root: objects must be known; scalars with other names are ignored (root_scalars_free).
    "": {"model": "object", "search": "object", "speculative": "object", "engine": "object"},
    "model": {
        "type": "string",
        "tokenizer_dir": "string",
        "vocab_size": "int",
        "context_length": "int",
        "pad_token_id": "int",
        "bos_token_id": "int",
        "sep_token_id": "int",
        "decoder_start_token_id": "int",
        "eos_token_id": "int_or_array",
        "bot_token_id": "int",
        "eot_token_id": "int",
        "bor_token_id": "int",
        "eor_token_id": "int",
        "decoder": "object",
        "mtp": "object",
        # The multimodal pipeline (qwen3_5 / qwen3_5_moe): its media token ids and its two other sessions.
        # `vision_end_token_id` is refused ("Unknown value"); the processor writes the literal token.
        "image_token_id": "int",
        "video_token_id": "int",
        "vision_start_token_id": "int",
        "embedding": "object",
        "vision": "object",
    },
    "model.embedding": {"filename": "string", "session_options": "object", "inputs": "object", "outputs": "object"},
    "model.embedding.session_options": _SESSION_OPTIONS,
    "model.embedding.inputs": {"input_ids": "string", "image_features": "string"},
    "model.embedding.outputs": {"inputs_embeds": "string"},
    # `patch_size` defaults to 14 (Qwen2.5-VL's); `inputs.image_grid_thw`, when it names the vision graph's
    # grid input, makes the runtime run the graph once per image (passes/vision.py says why mtpc's does not).
    "model.vision": {"filename": "string", "config_filename": "string", "session_options": "object",
                     "spatial_merge_size": "int", "patch_size": "int", "inputs": "object", "outputs": "object"},
    "model.vision.session_options": _SESSION_OPTIONS,
    "model.vision.inputs": {"pixel_values": "string", "image_grid_thw": "string"},
    "model.vision.outputs": {"image_features": "string"},
    "model.decoder": {
        "filename": "string",
        "session_options": "object",
        "run_options": "object",
        "hidden_size": "int",
        "num_attention_heads": "int",
        "num_key_value_heads": "int",
        "num_hidden_layers": "int",
        "head_size": "int",
        "state_update_capacity": "int",
        "conv_cache_size": "int",
        "layer_types": "array",
        "sliding_window": "object",
        # Parsed since 0.16.0 at least (the oldest release probed).
        "state_groups": "array",
        "shared_initializers": "array",
        "inputs": "object",
        "outputs": "object",
    },
    "model.decoder.session_options": _SESSION_OPTIONS,
    "model.decoder.run_options": {},
    "model.decoder.inputs": {key: "string" for key in _DECODER_INPUTS},
    "model.decoder.outputs": {key: "string" for key in _DECODER_OUTPUTS},
    "model.decoder.sliding_window": {
        "window_size": "int",
        "pad_value": "int",
        "alignment": "string",
        "slide_key_value_cache": "bool",
        "slide_inputs": "bool",
        "layers": "array",
        "cache_slack": "int",
    },
    "model.decoder.state_groups[]": {"kind": "string", "layer_ids": "array", "state_update": "object"},
    "model.decoder.state_groups[].state_update": {"capacity": "int", "key_head_count": "int", "enabled": "bool"},
    "model.decoder.shared_initializers[]": _SHARED_INITIALIZER,
    "model.mtp": {
        # New in 0.17.0: 0.16.0 refuses it ("model:mtp: Unknown value"), so no older release runs a
        # package with a head.
        "enabled": "bool",
        "filename": "string",
        "session_options": "object",
        "run_options": "object",
        "shared_initializers": "array",
        "num_hidden_layers": "int",
        "num_key_value_heads": "int",
        "head_size": "int",
        "main_hidden_states": "string",
        "inputs": "object",
        "outputs": "object",
    },
    "model.mtp.session_options": _SESSION_OPTIONS,
    "model.mtp.run_options": {},
    "model.mtp.shared_initializers[]": _SHARED_INITIALIZER,
    # The head section names only these roles; the runtime's projection inherits the
    # paged inputs (block_table, ...) from model.decoder.inputs.
    "model.mtp.inputs": {
        key: "string"
        for key in ("input_ids", "hidden_states", "attention_mask", "position_ids", "past_key_names", "past_value_names")
    },
    "model.mtp.outputs": {
        key: "string" for key in ("logits", "hidden_states", "present_key_names", "present_value_names")
    },
    "search": {
        "min_length": "int",
        "max_length": "int",
        "batch_size": "int",
        "num_beams": "int",
        "num_return_sequences": "int",
        "top_k": "int",
        "top_p": "number",
        "temperature": "number",
        "repetition_penalty": "number",
        "length_penalty": "number",
        "diversity_penalty": "number",
        "no_repeat_ngram_size": "int",
        "random_seed": "int",
        "chunk_size": "int",
        "do_sample": "bool",
        "early_stopping": "bool",
        "past_present_share_buffer": "bool",
    },
    "speculative": {
        "max_draft_tokens": "int",
        "ngram_size": "int",
        "ngram_chained_lookup": "bool",
        "min_adaptive_k": "int",
        "cooldown": "bool",
    },
    "engine": {"dynamic_batching": "object", "static_batching": "object"},
    "engine.dynamic_batching": {
        "block_size": "int",
        "num_blocks": "int",
        "gpu_utilization_factor": "number",
        "max_batch_size": "int",
        "max_scheduled_tokens": "int",
        # New in 0.17.0, as decoder.inputs.logits_indices; 0.16.0 refuses both.
        "prefix_caching": "bool",
    },
    "engine.static_batching": {"max_batch_size": "int"},
}

PROFILE = OrtGenaiProfile(
    version="0.18.0",
    keys=MappingProxyType({section: MappingProxyType(keys) for section, keys in _KEYS.items()}),
    # Any other session-option key becomes an ORT session config entry and must be a
    # string; every run-option key is a run-config entry, also strings only.
    open_string_sections=frozenset(
        {"model.decoder.session_options", "model.mtp.session_options", "model.decoder.run_options", "model.mtp.run_options",
         "model.embedding.session_options", "model.vision.session_options"}
    ),
    root_scalars_free=True,
    execution_providers=frozenset({"cpu", "cuda"}),
    # PagedAttention (the op the paged export uses for full-attention layers) exists
    # only for the CUDA execution provider, and only for half-precision activations.
    paged_execution_providers=frozenset({"cuda"}),
    paged_io_dtypes=frozenset({"float16", "bfloat16"}),
    # CPU kernels of GroupQueryAttention, the linear-attention ops and MatMulNBits take float32 /
    # float16 only; the CUDA ones take bfloat16 too (onnxruntime contrib-op docs).
    bfloat16_execution_providers=frozenset({"cuda"}),
    # og.MtpGenerator casts the logits it reads to float32; on CPU with float32 logits
    # that Cast has equal input and output types and onnxruntime refuses it ("Cast -
    # input and output types are the same"). Graphs whose `logits` output is float16
    # (one final Cast) run, and MTP output then equals plain greedy decoding. Only
    # needed when a head is emitted: a text-only package keeps exact float32 logits.
    # CUDA was not measured, so it keeps the I/O dtype.
    mtp_logits_dtype_by_provider=MappingProxyType({"cpu": "float16"}),
    # With `shared_initializers` present, og.Model on the CPU EP fails with
    # "GetMemoryInfo for CPU should not be used."; the same model loads without the list.
    shared_initializer_failing_providers=frozenset({"cpu"}),
    # Dense, dynamic cache: false. Our dense graphs return present = past ++ new, the
    # layout share_buffer=false feeds; true would make the runtime allocate every KV
    # cache at max_length up front, and max_length defaults to the context length
    # (262144 for real Qwen3.5).
    # Dense, static cache: true, asked for by the spec. GroupQueryAttention notices
    # that past and present are one buffer and writes the new entries in place; on
    # CPU greedy decoding of our graphs then equals the numpy reference
    # (tests/profiles/test_static_kv_cache.py).
    # Paged: true. Paged caches are updated in place by PagedAttention, and the
    # reference export writes true there; a paged cache is never "static".
    past_present_share_buffer_by_cache=MappingProxyType(
        {
            (AttentionMode.DENSE, "dynamic"): False,
            (AttentionMode.DENSE, "static"): True,
            (AttentionMode.PAGED, "dynamic"): True,
        }
    ),
    # "Prefix caching does not yet support an auxiliary cache that mirrors target
    # blocks": an Engine-hosted MTP head needs prefix caching off, said explicitly.
    prefix_caching_with_mtp=False,
    # The reference builder's default when neither num_blocks nor the factor is given.
    default_gpu_utilization_factor=0.6,
    # Builder-side limits the runtime was validated with (the parser only checks > 0).
    max_batch_size_limit=256,
    min_block_size=16,
    max_draft_tokens_range=(1, 16),
    # "Decoder state update capacity must be in [1, 8]" (parser); the builder's state_update_capacity
    # takes 0..8 ("kMaxStateUpdateCapacity"). The Engine caps drafts per step at this capacity on a
    # model with fixed (conv / recurrent) state: PagedCacheManager::MaxDraftTokensPerStep.
    max_state_update_capacity=8,
    # `model.type` is not checked at parse; a wrong one fails late with a poor error.
    # Embeddings in the graph (input_ids in): `qwen3_5_text`, and `qwen3_5_moe_text` for the MoE family,
    # as the 0.18.0 builder writes them (`qwen3_5` / `qwen3_5_moe` take inputs_embeds).
    # GLM-4.5: 0.18.0 knows no `glm4_moe` (nor `deepseek_v3`): "Unsupported model_type in config.json".
    # Its decoder-only types differ only in type-specific behaviour around a plain decoder with a KV
    # cache; `llama` has none (qwen2 / qwen3 / phi3 would inject their own tool and think token ids,
    # out of GLM's vocabulary; the Qwen-VL types feed 3-D positions). og.Generator and og.MtpGenerator
    # run a GQA decoder and head under `llama` as under every other type (measured: same tokens and
    # draft counters), and tests/glm4moe/ decode mtpc's GLM packages under it as transformers does.
    # Qwen3-Next: no `qwen3_next` type either, and `qwen3_5_moe_text` makes 0.17.1 feed 3-D MRoPE positions
    # to its 1-D position_ids ("Invalid rank for input: position_ids"); under `llama` both releases feed
    # [B, S] positions and carry the conv / recurrent state the config names (tests/conformance decodes
    # it as transformers does and drafts as the numpy rendition, on 0.18.0 and 0.17.1).
    # deepseek2 (MLA): no `deepseek_v2` / `deepseek_v3` / `glm4_moe_lite` type; the graphs run the absorbed form,
    # a decoder with one KV head of the latent's width (GroupQueryAttention, or plain ops on CPU: profiles/kernels.py,
    # the same dense cache), which `llama` allocates and feeds from the config's
    # head_size / num_key_value_heads like any other (tests/conformance decodes it on 0.18.0 and 0.17.1).
    # A window-sized cache exists (decoder.sliding_window, a shared past / present buffer, GroupQueryAttention's
    # sliding_window_cache: the 0.18.0 builder's CPU form, builders/base.py) and decodes, but the runtime refuses to
    # rewind it once it has evicted (src/models/windowed_kv_cache.cpp CheckWindowedKvCacheRewind, whose message
    # 0.18.0 prints), and og.MtpGenerator rewinds the main model after every rejected draft (src/mtp_generator.cpp
    # GenerateStepSingle / GenerateStepMulti: main_->RewindToLength); a dense dynamic cache is sized at the window
    # plus slack, which no full present has. Measured on 0.18.0: tests/profiles/test_windowed_kv_cache.py.
    sliding_kv_cache=("onnxruntime-genai 0.18.0 refuses to rewind a window-sized KV cache once it has evicted "
                      "(src/models/windowed_kv_cache.cpp, CheckWindowedKvCacheRewind), and og.MtpGenerator rewinds "
                      "the main model after every rejected draft (src/mtp_generator.cpp, main_->RewindToLength)"),
    # step35: no Step type either; its full and sliding layers are GroupQueryAttention layers of one KV geometry (or
    # their plain-op forms, the same dense cache), which `llama` feeds like any other (tests/conformance, both releases).
    model_types=MappingProxyType({"qwen35": "qwen3_5_text", "qwen35moe": "qwen3_5_moe_text", "glm4moe": "llama",
                                 "qwen3next": "llama", "deepseek2": "llama", "step35": "llama"}),
    # A `MultiModalLanguageModel` (src/models/model.cpp, `ModelType::IsVLM`): vision, embedding, then the decoder
    # with 3-D MRoPE positions the runtime computes as transformers' get_rope_index does (position_inputs.cpp,
    # `Qwen2VLPositionInputs`); tests/vision/ decode both as transformers does.
    vision_model_types=MappingProxyType({"qwen35": "qwen3_5", "qwen35moe": "qwen3_5_moe"}),
)
