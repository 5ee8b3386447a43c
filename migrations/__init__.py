"""Alembic environment and versions: one portable migration tree for SQLite and PostgreSQL."""
