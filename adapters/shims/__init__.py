"""The adapters' only reach into third-party internals: one module per SDK, each pinned in
pyproject.toml and checked against the installed SDK by tests/test_shims.py."""
