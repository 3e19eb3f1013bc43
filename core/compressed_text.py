"""Text kept zlib-compressed, against a preset dictionary: the mail bodies.

Every paused execution holds its review mail until it leaves the outbox (the dev mailbox keeps it), and the HTML of
that mail, inline styles and all as mail clients need, was most of the bytes a paused execution cost. Compressed
alone, a review mail's two bodies came to ~2.1 KB; against a dictionary holding what every review mail shares (its
layout, styles and fixed sentences: tools/mail_dictionary.py) they come to ~0.6 KB.

A zlib stream made with a dictionary names it in its header by the dictionary's Adler-32 (RFC 1950, DICTID); a
stream made without one, as rows written before the dictionaries were, says so. Reading picks the dictionary the
stream names, so a dictionary in use is never edited or removed: add a new one and make it `_CURRENT`.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

_FOLDER = Path(__file__).resolve().parent / "text_dictionaries"
# Each dictionary's file and the Adler-32 it must have: checked when this module loads, so that an edited file
# is found at start-up, not when a row compressed with the original cannot be read.
_DICTIONARIES = {"mail-1.txt": 0xE50BC76D}
_CURRENT = "mail-1.txt"
_FDICT = 0x20  # the header's flag byte: a dictionary id follows


def _load() -> dict[int, bytes]:
    loaded = {}
    for name, adler in _DICTIONARIES.items():
        data = (_FOLDER / name).read_bytes()
        if zlib.adler32(data) != adler:
            raise RuntimeError(
                f"{_FOLDER / name} changed (Adler-32 {zlib.adler32(data):#010x}, not {adler:#010x}):"
                " rows compressed with it could not be read; restore it and add a new dictionary"
            )
        loaded[adler] = data
    return loaded


_BY_ID = _load()
_CURRENT_DICTIONARY = _BY_ID[_DICTIONARIES[_CURRENT]]


def compress(text: str) -> bytes:
    """`text` compressed against the current dictionary."""
    encoder = zlib.compressobj(9, zlib.DEFLATED, 15, 9, zlib.Z_DEFAULT_STRATEGY, _CURRENT_DICTIONARY)
    return encoder.compress(text.encode()) + encoder.flush()


def decompress(stored: bytes) -> str:
    """The text of a zlib stream, made against one of the dictionaries or against none."""
    if len(stored) >= 6 and stored[1] & _FDICT:
        dictionary_id = int.from_bytes(stored[2:6], "big")
        dictionary = _BY_ID.get(dictionary_id)
        if dictionary is None:
            raise ValueError(f"compressed against an unknown dictionary (Adler-32 {dictionary_id:#010x})")
        decoder = zlib.decompressobj(zlib.MAX_WBITS, dictionary)
    else:
        decoder = zlib.decompressobj()
    text = decoder.decompress(stored) + decoder.flush()
    if not decoder.eof:
        raise ValueError("a compressed text cut short")
    return text.decode()


class CompressedText(sa.TypeDecorator[str]):
    """Text stored as `compress` makes it (a binary column), read back with `decompress`."""

    impl = sa.LargeBinary
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> bytes | None:
        return None if value is None else compress(value)

    def process_result_value(self, value: bytes | None, dialect: Dialect) -> str | None:
        return None if value is None else decompress(value)
