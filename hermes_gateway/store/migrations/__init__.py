"""The store's schema migrations (Alembic): `env.py` and one file per revision in `versions/`.
`store_migrate` runs them when the store opens, and `hermes db upgrade` on demand."""

# The newest revision in versions/. Opening a database already there costs one read and no
# import of Alembic (11 MB and some startup time); tests/test_store_migration.py checks this
# against Alembic's own view of the scripts.
HEAD = "r15"
