"""What emitters produce (`Artifact`: a package file's bytes, or its chunks produced on demand) and what
they may use besides the IR (`EmitContext`: the source, its weights opened on first use, shared layouts)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:  # the emitters pull in onnx_ir (and sympy): imported only when a package is built
    from ..graphs.initializers import StoredTensor
    from ..ir import GraphContract, ModelIR
    from ..sources.info import SourceInfo
    from ..weights import WeightStore
    from .speed_table import SpeedTable

Progress = Callable[[str], None]

# The tensors of one `.onnx.data` file that another graph may borrow, by initializer name.
DataLayout = "dict[str, StoredTensor]"


@dataclass(frozen=True)
class Artifact:
    relpath: str  # path inside the package, "/"-separated
    content: bytes | None = None  # small files
    chunks: Callable[[], Iterator[bytes | memoryview]] | None = None  # large files, streamed
    schema: str | None = None  # schema file in schemas/ the content must satisfy
    # A streamed file's length, known from its layout before any chunk is produced (None: not known).
    # Lets the contract checks measure external data against its file without reading the weights.
    size: int | None = None
    # Bytes that cost real work to make and that no other file depends on (a GGUF vocabulary turned
    # into tokenizer.json, a document rendered as YAML): produced only when read. The in-memory checks of
    # a verb that writes nothing (`check SPEC`, `plan`, `diff SPEC`) leave them unread, or read their
    # `document` where it is known; `compile` reads them first.
    deferred: bool = False
    # An ONNX graph left unbuilt (`build(..., defer_graphs=True)`): the I/O contract its graph is built to,
    # which the contract checks read in place of the graph (tests/emit/test_graph_files.py holds the two equal).
    interface: GraphContract | None = None
    # (content, what it parses to), when the artifact's maker has parsed it already (an emitter reading
    # its YAML back, the driver validating it), or (chunks, the document they render) for bytes made on
    # demand from a document (their maker checks that they read back as it): the checks use it rather
    # than parse the same bytes again, or make them. Kept with the very bytes (or maker of bytes) it is
    # the parse of, so a copy with other content does not inherit it.
    parsed: tuple[object, object] | None = field(default=None, compare=False, repr=False)

    @property
    def document(self) -> object:
        """What the bytes parse to, if their maker knows (None: parse them yourself)."""
        if self.parsed is not None and self.parsed[0] is self._bytes_maker:
            return self.parsed[1]
        return None

    def with_document(self, document: object) -> "Artifact":
        return replace(self, parsed=(self._bytes_maker, document))

    @property
    def _bytes_maker(self) -> object:
        return self.content if self.content is not None else self.chunks

    def made(self) -> "Artifact":
        """This artifact with its bytes made and held (`content`), its document kept."""
        made = replace(self, content=self.read(), chunks=None, deferred=False)
        return made.with_document(self.document) if self.document is not None else made

    @property
    def nbytes(self) -> int | None:
        """The file's length without producing it: the content's, or the declared size of a streamed file."""
        return len(self.content) if self.content is not None else self.size

    def iter_bytes(self) -> Iterator[bytes | memoryview]:
        if self.content is not None:
            yield self.content
        elif self.chunks is not None:
            yield from self.chunks()

    def read(self) -> bytes:
        return b"".join(self.iter_bytes())


def from_document(relpath: str, document: object, render: Callable[[object], bytes], parse: Callable[[bytes], object],
                  *, schema: str | None = None) -> Artifact:
    """A file known by its document, its text made when its bytes are read (written, or compared by bytes with
    a file on disk). The checks and `diff SPEC SPEC` read the document: a large document's text (a 64-layer
    model's inference_metadata.yaml, its quantization.json) costs every metadata verb to make and parse back.
    The text is made once, and must read back as the document (a bug in mtpc otherwise)."""
    made: list[bytes] = []

    def text() -> Iterator[bytes]:
        if not made:
            data = render(document)
            if parse(data) != document:
                from ..util.diagnostics import Diagnostic, ExitCode, MtpcError

                raise MtpcError([Diagnostic(f"{relpath} does not read back as the document it was rendered from")],
                                ExitCode.INTERNAL)
            made.append(data)
        yield made[0]

    return Artifact(relpath, chunks=text, deferred=True, schema=schema).with_document(document)


def _quiet(message: str) -> None:
    pass


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container or `taskset` narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass
class EmitContext:
    """What emitters may use besides the IR.

    The weight store opens on first use and stays open while `.onnx.data`
    artifacts stream; whoever consumes the artifacts calls `close` afterwards.
    """

    info: SourceInfo
    weights_factory: Callable[[], WeightStore]
    progress: Progress = _quiet
    # Weights produced in parallel while a data file streams (`DataFile.chunks`); the bytes are the same for any value.
    jobs: int = field(default_factory=available_cores)
    # Data file (package path) -> its shareable tensors; written by onnx_graphs, read by genai_config.
    data_layouts: dict[str, DataLayout] = field(default_factory=dict)
    # Graph (package path) -> the data file it reads its shareable tensors from, when not its own
    # (the main model reads the embedding and LM head from the head's file); written by onnx_graphs.
    shared_data_files: dict[str, str] = field(default_factory=dict)
    # Weight -> max |stored - source's dequantization| of source-quantized weights re-quantized, filled
    # as the data files stream (see graphs/parameters.py); `compile` reports it once they are written.
    requantization_error: dict[str, float] = field(default_factory=dict)
    # What `provenance.json` records (see mtpc.emit.provenance_record); None when the IR was built without a spec.
    provenance: dict | None = None
    # Leave the ONNX graphs unbuilt until their bytes are read (see emit/graph_files.py), for a verb that
    # writes nothing; honoured only where no other emitter needs what building them records.
    defer_graphs: bool = False
    # A `mtpc tune` report's table for the model card (`compile --tune-report`); None: the card has none.
    speed_table: SpeedTable | None = None
    _weights: WeightStore | None = field(default=None, init=False, repr=False)

    @property
    def weights(self) -> WeightStore:
        if self._weights is None:
            self._weights = self.weights_factory()
        return self._weights

    def close(self) -> None:
        if self._weights is not None:
            self._weights.close()
            self._weights = None


Emitter = Callable[["ModelIR", EmitContext], list[Artifact]]
