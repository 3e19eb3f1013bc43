"""core/compressed_text.py: mail bodies compressed against a preset dictionary, read back whichever way a row was
written; and, through the service, a real review mail's stored bodies a fraction of what zlib alone makes."""

from __future__ import annotations

import zlib

import pytest
import sqlalchemy as sa

from core.compressed_text import compress, decompress
from core.models import MailMessage
from tests.conftest import Service
from tests.review.mail_support import paused_run, review_mail


def test_text_comes_back_as_it_went_in() -> None:
    for text in ("", "plain é — ✓\n" * 3, '<p style="margin:0">Review needed</p>\n' * 200):
        stored = compress(text)
        assert stored[1] & 0x20  # the stream names its dictionary
        assert decompress(stored) == text


def test_a_row_compressed_without_a_dictionary_still_reads() -> None:
    assert decompress(zlib.compress(b"written before the dictionaries", 6)) == "written before the dictionaries"


def test_a_stream_naming_an_unknown_dictionary_is_refused() -> None:
    encoder = zlib.compressobj(9, zlib.DEFLATED, 15, 9, zlib.Z_DEFAULT_STRATEGY, b"some other dictionary")
    stored = encoder.compress(b"text") + encoder.flush()
    with pytest.raises(ValueError, match="unknown dictionary"):
        decompress(stored)


def test_a_stream_cut_short_is_refused() -> None:
    stored = compress("Approve: https://vouch.example/review/link/abc\n" * 20)
    with pytest.raises((ValueError, zlib.error)):
        decompress(stored[: len(stored) // 2])


async def test_a_review_mail_is_stored_in_a_fraction_of_what_zlib_alone_makes(service: Service) -> None:
    run = await paused_run(service)
    mail = await review_mail(service, run.execution_id)
    async with service.db.reading() as session:
        text, html = (
            await session.execute(
                sa.select(sa.func.length(MailMessage.text_body), sa.func.length(MailMessage.html_body)).where(
                    MailMessage.id == mail.id
                )
            )
        ).one()
    assert mail.html_body is not None
    alone = len(zlib.compress(mail.text_body.encode(), 6)) + len(zlib.compress(mail.html_body.encode(), 6))
    assert text + html < alone / 2.5, (text, html, alone)
