"""One adapter per file format: each reads into or writes from the canonical form."""
