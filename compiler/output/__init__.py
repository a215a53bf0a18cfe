"""Writing a package to disk: atomically, replacing only what is safe to lose (`write`), with a journal
that lets the next run finish or undo a write that was killed (`journal`).

The only code that writes into an output folder. May import: `util`, `emit` (artifacts, and the model
card's signature that marks a folder as an mtpc package).
"""
