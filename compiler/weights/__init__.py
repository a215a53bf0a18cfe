"""Weights, which never live in the IR: the weight-store interface every source implements under
canonical names and conventions (`store`), the tensors and shapes an architecture needs (`shapes`), and quantization for MatMulNBits with the per-weight
decision of what to store (`quant`).

`from mtpc.weights import WeightStore` names the interface: this package re-exports `store`'s and `shapes`' names.
May import: `util`, `ir`.
"""

from .shapes import *  # noqa: F401,F403
from .store import *  # noqa: F401,F403
