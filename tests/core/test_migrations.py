"""core.migrate: the migrated schema is at head and matches the models, on both backends."""

from __future__ import annotations

import asyncio
import zlib
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection

from core.db import Database
from core.engines import make_engine
from core.migrate import alembic_config, current_revision, head_revision, upgrade
from core.models import Base, MailMessage

TABLES = {
    "users",
    "api_keys",
    "executions",
    "checkpoints",
    "decisions",
    "events",
    "tool_calls",
    "mail_messages",
    "workspace_files",
    "web_sessions",
    "signin_failures",
    "signup_requests",
    "api_key_usage",
    "idempotency_records",
    "review_links",
    "review_timers",
    "webhook_deliveries",
    "webhook_attempts",
    "webhook_secrets",
    "external_keys",
    "trace_exports",
    "suites",
    "suite_tasks",
    "suite_runs",
}


def _table_names(conn: Connection) -> set[str]:
    return set(sa.inspect(conn).get_table_names())


def _drift(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(conn, opts={"compare_type": True})
    return list(compare_metadata(context, Base.metadata))


async def test_database_is_at_head(db: Database) -> None:
    head = head_revision()
    assert head
    assert await current_revision(db.engine) == head


async def test_all_tables_exist(db: Database) -> None:
    async with db.engine.connect() as conn:
        names = await conn.run_sync(_table_names)
    assert names >= TABLES
    assert TABLES == set(Base.metadata.tables)


async def test_migrations_match_the_models(db: Database) -> None:
    async with db.engine.connect() as conn:
        drift = await conn.run_sync(_drift)
    assert drift == []


async def test_upgrade_from_empty_is_idempotent_and_reversible(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'fresh.sqlite3'}"
    # upgrade() runs its own event loop: call it off this one.
    await asyncio.to_thread(upgrade, url)
    await asyncio.to_thread(upgrade, url)
    engine = make_engine(url)
    try:
        assert await current_revision(engine) == head_revision()
        await asyncio.to_thread(command.downgrade, alembic_config(url), "base")
        async with engine.connect() as conn:
            assert await conn.run_sync(_table_names) <= {"alembic_version"}
        assert await current_revision(engine) is None
        await asyncio.to_thread(upgrade, url)
        async with engine.connect() as conn:
            assert await conn.run_sync(_table_names) >= TABLES
    finally:
        await engine.dispose()


async def test_mail_bodies_are_compressed_in_place_and_back(database_url: str) -> None:
    # Run against a database of this test's own (either backend), taken back to before 0019 with a mail in it.
    html = "<p style=\"font-family:-apple-system,'Segoe UI',Roboto\">Review needed</p>\n" * 40
    await asyncio.to_thread(command.downgrade, alembic_config(database_url), "0018")
    engine = make_engine(database_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "INSERT INTO mail_messages (id, message_key, sender, recipient, subject, text_body, html_body,"
                    " status, attempts, created_at) VALUES ('m1', 'k1', 'a@x.test', 'b@x.test', 's', 'plain é',"
                    " :html, 'queued', 0, CURRENT_TIMESTAMP), ('m2', 'k2', 'a@x.test', 'b@x.test', 's', 'only text',"
                    " NULL, 'queued', 0, CURRENT_TIMESTAMP)"
                ),
                {"html": html},
            )
        await asyncio.to_thread(upgrade, database_url)
        async with engine.connect() as conn:
            stored = (await conn.execute(sa.text("SELECT html_body FROM mail_messages WHERE id = 'm1'"))).scalar_one()
            assert isinstance(stored, bytes) and len(stored) < len(html) // 5
            mails = (await conn.execute(sa.select(MailMessage.id, MailMessage.text_body, MailMessage.html_body)
                                        .order_by(MailMessage.id))).all()
            assert [tuple(mail) for mail in mails] == [("m1", "plain é", html), ("m2", "only text", None)]
        await asyncio.to_thread(command.downgrade, alembic_config(database_url), "0018")
        async with engine.connect() as conn:
            back = (await conn.execute(sa.text("SELECT text_body, html_body FROM mail_messages ORDER BY id"))).all()
            assert [tuple(row) for row in back] == [("plain é", html), ("only text", None)]
    finally:
        await engine.dispose()


async def test_mail_that_left_before_0020_drops_its_content(database_url: str) -> None:
    await asyncio.to_thread(command.downgrade, alembic_config(database_url), "0019")
    engine = make_engine(database_url)
    body = zlib.compress(b"Approve: https://vouch.example/review/link/s3cr3t", 6)
    rows = [
        ("m1", "sent", "Review needed: Note [vouch:0123456789abcdef]"),
        ("m2", "failed", "Review needed: Other [vouch:fedcba9876543210]"),
        ("m3", "queued", "Review needed: Later [vouch:00112233445566778899]"),
        ("m4", "dev_mailbox", "Review needed: Dev"),
    ]
    try:
        async with engine.begin() as conn:
            for message_id, status, subject in rows:
                await conn.execute(
                    sa.text(
                        "INSERT INTO mail_messages (id, message_key, sender, recipient, subject, text_body, html_body,"
                        " status, attempts, created_at) VALUES (:id, :id, 'a@x.test', 'b@x.test', :subject, :body,"
                        " :body, :status, 1, CURRENT_TIMESTAMP)"
                    ),
                    {"id": message_id, "subject": subject, "body": body, "status": status},
                )
        await asyncio.to_thread(upgrade, database_url)
        async with engine.connect() as conn:
            mails = (
                await conn.execute(
                    sa.select(MailMessage.id, MailMessage.subject, MailMessage.text_body, MailMessage.html_body)
                    .order_by(MailMessage.id)
                )
            ).all()
        kept = "Approve: https://vouch.example/review/link/s3cr3t"
        left, waiting = mails[:2], mails[2:]
        assert [(mail.subject, mail.html_body) for mail in left] == [
            ("Review needed: Note", None),
            ("Review needed: Other", None),
        ]
        assert not [mail.text_body for mail in left if "s3cr3t" in mail.text_body or not mail.text_body]
        assert [tuple(mail) for mail in waiting] == [
            ("m3", "Review needed: Later [vouch:00112233445566778899]", kept, kept),
            ("m4", "Review needed: Dev", kept, kept),
        ]
    finally:
        await engine.dispose()


async def test_0022_recompresses_mail_bodies_against_the_dictionary_and_back(database_url: str) -> None:
    await asyncio.to_thread(command.downgrade, alembic_config(database_url), "0021")
    engine = make_engine(database_url)
    text = "Approve: https://vouch.example/review/link/s3cr3t\nThe links work once and expire in 72 hours.\n"
    html = "<p style=\"margin:0 0 8px;font-weight:600;\">Review needed</p>\n" * 30
    plain = {"text": zlib.compress(text.encode(), 6), "html": zlib.compress(html.encode(), 6)}
    try:
        async with engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "INSERT INTO mail_messages (id, message_key, sender, recipient, subject, text_body, html_body,"
                    " status, attempts, created_at) VALUES ('m1', 'k1', 'a@x.test', 'b@x.test', 's', :text, :html,"
                    " 'queued', 0, CURRENT_TIMESTAMP), ('m2', 'k2', 'a@x.test', 'b@x.test', 's', :text, NULL,"
                    " 'dev_mailbox', 0, CURRENT_TIMESTAMP)"
                ),
                plain,
            )
        await asyncio.to_thread(upgrade, database_url)
        async with engine.connect() as conn:
            bodies = sa.text("SELECT text_body, html_body FROM mail_messages WHERE id = 'm1'")
            stored = (await conn.execute(bodies)).one()
            assert all(bytes(body)[1] & 0x20 for body in stored)  # each now names the dictionary it was made against
            assert len(stored.html_body) < len(plain["html"])
            mails = (
                await conn.execute(
                    sa.select(MailMessage.id, MailMessage.text_body, MailMessage.html_body).order_by(MailMessage.id)
                )
            ).all()
            assert [tuple(mail) for mail in mails] == [("m1", text, html), ("m2", text, None)]
        await asyncio.to_thread(command.downgrade, alembic_config(database_url), "0021")
        async with engine.connect() as conn:
            back = (await conn.execute(sa.text("SELECT text_body, html_body FROM mail_messages ORDER BY id"))).all()
        assert [tuple(zlib.decompress(b).decode() if b is not None else None for b in row) for row in back] == [
            (text, html),
            (text, None),
        ]
    finally:
        await engine.dispose()
