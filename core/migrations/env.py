"""Alembic environment: runs on aiosqlite and asyncpg alike."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from alembic import context
from sqlalchemy.engine import Connection

from core.engines import make_engine
from core.models import Base, UTCDateTime

config = context.config


def _render_item(type_: str, obj: Any, autogen_context: Any) -> str | Literal[False]:
    # Migrations stay plain SQLAlchemy: UTCDateTime's column type is a zoned DATETIME.
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        render_item=_render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str) -> None:
    engine = make_engine(url)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=Base.metadata)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_run_async(config.get_main_option("sqlalchemy.url") or ""))
