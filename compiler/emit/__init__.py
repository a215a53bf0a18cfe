"""Emitters: pure functions from the final IR (plus a weight store) to artifacts.

An emitter never touches the file system. It returns `Artifact`s; the driver
validates each against its schema and writes them all atomically
(`mtpc.output`). Large tensor data is produced lazily through `Artifact.chunks`
so a model's weights stream into `.onnx.data` without being held in memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator


@dataclass(frozen=True)
class Artifact:
    relpath: str  # path inside the package, "/"-separated
    content: bytes | None = None  # small files
    chunks: Callable[[], Iterator[bytes | memoryview]] | None = None  # large files, streamed
    schema: str | None = None  # schema file in schemas/ (or "conformance:<name>") the content must satisfy
    media_type: str = "application/octet-stream"

    def iter_bytes(self) -> Iterator[bytes | memoryview]:
        if self.content is not None:
            yield self.content
        elif self.chunks is not None:
            yield from self.chunks()

    def read(self) -> bytes:
        return b"".join(self.iter_bytes())


# name -> emitter(ir, weights) -> Iterable[Artifact]. Registration order is output order.
Emitter = Callable[..., Iterable[Artifact]]
EMITTERS: dict[str, Emitter] = {}


def register(name: str) -> Callable[[Emitter], Emitter]:
    def deco(fn: Emitter) -> Emitter:
        if name in EMITTERS:
            raise ValueError(f"emitter {name!r} registered twice")
        EMITTERS[name] = fn
        return fn

    return deco
