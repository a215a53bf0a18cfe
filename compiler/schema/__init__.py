"""The JSON Schemas of the spec and of every artifact (the files live in `schemas/`, shipped as
`mtpc.schemas`): loading and applying them (`validation`), and the compiled yes/no verdict that answers
valid documents without jsonschema (`verdict`, with jsonschema's rules about values in `values`).

May import: `util`.
"""
