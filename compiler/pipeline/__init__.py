"""The compile pipeline end to end (`driver`): spec -> IR -> passes -> artifacts -> every check in
memory, behind `compile`, `plan`, `check SPEC`, `diff SPEC SPEC` and `verify`, so no verb can disagree
about what a spec means. It writes nothing (`output` does).

May import every layer below it: `util`, `schema`, `ir`, `weights`, `profiles`, `sources`, `passes`,
`spec`, `graphs`, `emit`, `reference`, `checks`.
"""
