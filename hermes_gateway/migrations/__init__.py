"""The store's schema migrations (Alembic): `env.py` and one file per revision in `versions/`.
`store_migrate` runs them when the store opens, and `hermes db upgrade` on demand."""
