"""mtpc: compile checkpoints that ship a multi-token-prediction head into runtime packages."""

__version__ = "0.1.0"
