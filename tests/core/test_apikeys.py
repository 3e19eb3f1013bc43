"""API key format, checksum, digest and scope implication (core.apikeys)."""

from __future__ import annotations

import re

import pytest

from core import apikeys
from core.apikeys import (
    KEY_LENGTH,
    PREFIX,
    display_hint,
    effective_scopes,
    generate_key,
    is_well_formed,
    key_digest,
)

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def test_generated_key_format() -> None:
    keys = {generate_key() for _ in range(50)}
    assert len(keys) == 50, "keys must be random"
    for key in keys:
        assert len(key) == KEY_LENGTH == 41
        assert key.startswith("svc_eval_")
        assert re.fullmatch(r"svc_eval_[0-9A-Za-z]{32}", key)
        assert is_well_formed(key)


def test_every_single_character_change_in_body_or_checksum_is_rejected() -> None:
    key = generate_key()
    for position in range(len(PREFIX), KEY_LENGTH):
        for replacement in BASE62:
            if replacement == key[position]:
                continue
            changed = key[:position] + replacement + key[position + 1 :]
            assert not is_well_formed(changed), (position, replacement)


def test_swapped_neighbours_are_rejected() -> None:
    key = generate_key()
    for position in range(len(PREFIX), KEY_LENGTH - 1):
        if key[position] == key[position + 1]:
            continue
        swapped = key[:position] + key[position + 1] + key[position] + key[position + 2 :]
        assert not is_well_formed(swapped), position


@pytest.mark.parametrize(
    "mangle",
    [
        lambda k: k[:-1],  # too short
        lambda k: k + "a",  # too long
        lambda k: "svc_evai_" + k[len(PREFIX) :],  # wrong prefix, same length
        lambda k: "SVC_EVAL_" + k[len(PREFIX) :],  # prefix is case-sensitive
        lambda k: "sk_live__" + k[len(PREFIX) :],
        lambda k: k[:20] + "-" + k[21:],  # not base62
        lambda k: k[:20] + "é" + k[21:],
        lambda k: "",
    ],
)
def test_malformed_keys_are_rejected(mangle: object) -> None:
    key = generate_key()
    assert callable(mangle)
    assert not is_well_formed(mangle(key))


def test_digest_depends_on_key_and_secret() -> None:
    key = generate_key()
    first = key_digest(key, b"a" * 32)
    assert re.fullmatch(r"[0-9a-f]{64}", first)
    assert first == key_digest(key, b"a" * 32)
    assert first != key_digest(key, b"b" * 32)
    assert first != key_digest(generate_key(), b"a" * 32)
    assert key not in first


def test_display_hint_shows_prefix_and_last_four_only() -> None:
    key = generate_key()
    hint = display_hint(key)
    assert hint.startswith(PREFIX)
    assert hint.endswith(key[-4:])
    assert key[len(PREFIX) : -4] not in hint


def test_manage_implies_create_and_read() -> None:
    assert effective_scopes(["eval:manage"]) == frozenset({"eval:create", "eval:read", "eval:manage"})
    assert effective_scopes({"eval:read"}) == frozenset({"eval:read"})
    assert effective_scopes(frozenset({"eval:create"})) == frozenset({"eval:create"})
    assert effective_scopes(["eval:create", "eval:read"]) == frozenset({"eval:create", "eval:read"})
    assert "eval:manage" not in effective_scopes(["eval:create", "eval:read"])
    assert effective_scopes([]) == frozenset()
    assert set(apikeys.SCOPES) == {"eval:create", "eval:read", "eval:manage"}
