"""The SSA IR: types, the op table, IR classes, builder, printer, parser, verifier, analyses and the
reference interpreter. Imports no other isozyme package."""
