"""Durable state: the SQLAlchemy async store (inbox, sessions, history), its hot path, health
circuits, search, and the Alembic schema migrations."""
