"""A numpy forward pass of the model, main decoder and MTP head (`forward`, the sparse FFN in `moe`),
written from the architecture and independent of the graph builder: the graphs must match it on
onnxruntime (`mtpc verify`, the tests).

May import: `util`, `ir`, `weights`. Never `graphs`: an oracle that shares code with what it checks
checks nothing.
"""
