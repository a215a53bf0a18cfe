"""A package loaded in onnxruntime-genai: its main model and MTP head as `og.Model`s, generators over them.

What every measurement of this package (`measure`, `decode`, `profile`) runs on; an
onnxruntime-genai failure while loading or running one is a finding with the runtime's reason
(`refusal`), not a traceback.
"""

from __future__ import annotations

import json
from typing import Any

from ..util.diagnostics import ExitCode, MtpcError
from .package import TunablePackage


class Runtime:
    """The package's main model and head loaded in onnxruntime-genai (and its tokenizer, when asked to encode).

    `threads` sets both sessions' intra-op threads (inter-op 1); `session_options` are laid over both
    configs after that (e.g. onnxruntime's profiler), `head_session_options` over the head's only."""

    def __init__(self, package: TunablePackage, threads: int | None = None,
                 session_options: dict[str, Any] | None = None, head_session_options: dict[str, Any] | None = None):
        import onnxruntime_genai as og

        self.og, self.package, self.threads = og, package, threads
        options = {"intra_op_num_threads": threads, "inter_op_num_threads": 1} if threads is not None else {}
        options.update(session_options or {})
        with refusal(f"onnxruntime-genai could not load {package.root}"):
            self.main = og.Model(self._config(package.root, options))
        with refusal(f"onnxruntime-genai could not load the head in {package.head_dir}"):
            self.head = og.Model(self._config(package.head_dir, {**options, **(head_session_options or {})}))
        self._tokenizer = None

    def _config(self, folder, session_options: dict[str, Any]):
        from ..profiles.ort_genai import text_view_config

        config = text_view_config(self.og, folder)  # a multimodal package's text view: the head drafts there
        if session_options:
            config.overlay(json.dumps({"model": {"decoder": {"session_options": session_options}}}))
        return config

    def encode(self, text: str) -> list[int]:
        if self._tokenizer is None:
            with refusal(f"onnxruntime-genai could not load the tokenizer of {self.package.root}"):
                self._tokenizer = self.og.Tokenizer(self.main)
        return [int(t) for t in self._tokenizer.encode(text)]

    def generator(self, model, max_length: int, draft: int = 0):
        og = self.og
        params = og.GeneratorParams(model)
        # Sampling off and nothing else: min_length, say, would turn on the runtime's logits processing,
        # a slower path for MTP's verify than plain argmax.
        params.set_search_options(do_sample=False, max_length=max_length)
        if draft:
            params.set_speculative_options(max_draft_tokens=draft)
            return og.MtpGenerator(self.main, self.head, params)
        return og.Generator(model, params)


class refusal:
    """An onnxruntime-genai failure while loading or running the package: a finding with the runtime's reason."""

    def __init__(self, what: str):
        self.what = what

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if error is None or not isinstance(error, Exception) or isinstance(error, MtpcError):
            return False
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise MtpcError.single(f"{self.what}: {reason}", exit_code=ExitCode.FINDINGS) from error
