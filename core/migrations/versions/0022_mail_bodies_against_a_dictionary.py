"""mail_messages.text_body and html_body compressed against a preset dictionary (core/compressed_text.py): a
review mail's two bodies ~2.1 KB → ~0.6 KB. Rows compressed without one are recompressed with it; downgrading
recompresses them without (revision 0019's downgrade reads plain zlib streams only).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07 20:45:00
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_BODIES = ("text_body", "html_body")
_BATCH = 500
# The dictionary file, read here by path: a migration does not follow the code that comes after it, and a
# dictionary's file never changes (core/compressed_text.py checks its Adler-32 as this does).
_DICTIONARY = Path(__file__).resolve().parents[2] / "text_dictionaries" / "mail-1.txt"
_DICTIONARY_ADLER = 0xE50BC76D


def _dictionary() -> bytes:
    data = _DICTIONARY.read_bytes()
    if zlib.adler32(data) != _DICTIONARY_ADLER:
        raise RuntimeError(f"{_DICTIONARY} changed: restore it")
    return data


def _with_dictionary(stored: bytes, dictionary: bytes) -> bytes:
    if stored[1] & 0x20:  # made against the dictionary already
        return stored
    encoder = zlib.compressobj(9, zlib.DEFLATED, 15, 9, zlib.Z_DEFAULT_STRATEGY, dictionary)
    return encoder.compress(zlib.decompress(stored)) + encoder.flush()


def _without_dictionary(stored: bytes, dictionary: bytes) -> bytes:
    if not stored[1] & 0x20:
        return stored
    decoder = zlib.decompressobj(zlib.MAX_WBITS, dictionary)
    return zlib.compress(decoder.decompress(stored) + decoder.flush(), 6)


def _recompress(convert: Callable[[bytes, bytes], bytes]) -> None:
    dictionary = _dictionary()
    mails = sa.table("mail_messages", sa.column("id", sa.String()), *(sa.column(b, sa.LargeBinary()) for b in _BODIES))
    bind = op.get_bind()
    after = ""
    while True:
        rows = bind.execute(
            sa.select(mails.c.id, *(mails.c[b] for b in _BODIES))
            .where(mails.c.id > after)
            .order_by(mails.c.id)
            .limit(_BATCH)
        ).all()
        for row in rows:
            values = {
                body: convert(bytes(value), dictionary)
                for body, value in zip(_BODIES, row[1:], strict=True)
                if value is not None
            }
            if values:
                bind.execute(sa.update(mails).where(mails.c.id == row[0]).values(**values))
        if len(rows) < _BATCH:
            return
        after = rows[-1][0]


def upgrade() -> None:
    _recompress(_with_dictionary)


def downgrade() -> None:
    _recompress(_without_dictionary)
