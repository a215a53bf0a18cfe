"""The typed IR: frozen dataclasses for the architecture, MTP head, I/O contracts, quantization plan and
targets (`model`, with its weight part in `weights`, the mixture-of-experts part in `moe`, the graphs' I/O
and the decoders as runtimes see them in `runtime`, the shared enums in `enums`), and the graphs' dense
I/O contracts derived from it (`contracts`). Fields added after fingerprints were fixed are `fields.added`.
Passes return a new IR; nothing mutates one.

`from mtpc.ir import ModelIR` names the IR, not the file it is written in: this package re-exports
`model`'s names (which include `weights`' and `moe`'s). May import: `util`.
"""

from .model import *  # noqa: F401,F403
