"""Alembic's environment: runs the revisions on the connection `store_migrate` hands over (in
its transaction, under its lock), never on a URL of its own."""

from __future__ import annotations

from alembic import context

from hermes_gateway.store.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run the store's migrations with `hermes db upgrade`")
context.configure(connection=connection, target_metadata=Base.metadata)
with context.begin_transaction():
    context.run_migrations()
