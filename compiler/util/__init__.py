"""Small services every layer shares: diagnostics and the exit-code table (`diagnostics`), progress on
stderr (`progress`), fast array copies (`arrays`), modules imported on first use (`lazy_import`),
"did you mean" (`suggest`), reading a file the user named (`user_files`), SIGINT / SIGTERM handling
(`interrupts`) and mtpc's version (`version`).

The bottom layer: it imports nothing else of mtpc, so anything may import it.
"""
