"""GGUF checkpoints as llama.cpp writes them: the header walked without gguf-py (`header`,
`constants`), its metadata (`metadata`), the name table of each architecture (`names`), where each
canonical weight lives and what the converter did to it (`layout`), metadata into the IR (`reader`),
the weights read lazily (`store`), block forms carried into MatMulNBits (`quant`, `blocks`) and the
vocabulary turned into `tokenizer.json` (`tokenizer`).

May import: `util`, `ir`, `weights`, and the rest of `sources`.
"""
