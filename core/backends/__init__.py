"""What differs between SQLite and PostgreSQL, one module per database behind one interface (`Backend`).

A `Database` picks its backend once, from its engine (`db.backend`); a session reaches it with `backend_of`.
To add a difference: a method on `Backend` (core/backends/base.py), implemented in each backend's module.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from core.backends.base import Backend
from core.backends.postgresql import POSTGRESQL
from core.backends.sqlite import SQLITE

__all__ = ["BACKEND", "Backend", "backend_for", "backend_of"]

# The session's backend, in its `info` (put there by the Database's session makers).
BACKEND = "vouch_backend"

_BY_DIALECT: dict[str, Backend] = {SQLITE.name: SQLITE, POSTGRESQL.name: POSTGRESQL}


def backend_for(dialect_name: str) -> Backend:
    """The backend of a database SQLAlchemy names `dialect_name`."""
    try:
        return _BY_DIALECT[dialect_name]
    except KeyError:
        raise ValueError(f"Vouch runs on SQLite or PostgreSQL, not {dialect_name}") from None


def backend_of(session: AsyncSession) -> Backend:
    """The backend of the database `session` is bound to."""
    found: Backend | None = session.info.get(BACKEND)
    if found is None:
        found = session.info[BACKEND] = backend_for(session.get_bind().dialect.name)
    return found
