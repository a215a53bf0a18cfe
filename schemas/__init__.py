"""JSON Schemas shipped with mtpc (data only; importable so installed wheels carry them)."""
