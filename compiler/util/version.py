"""mtpc's version, as `pyproject.toml` states it (a package records it in `provenance.json`)."""

__version__ = "0.1.0"
