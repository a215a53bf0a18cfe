"""Jinja2 templates shipped with mtpc (data only; importable so installed wheels carry them)."""
