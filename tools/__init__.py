"""Programs that make inputs for mtpc's tests and benchmarks (not part of the installed package)."""
