"""Fixtures of the client's own tests: a scripted HTTP server on a free port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from stub_http import Stub, serving


@pytest.fixture
def stub() -> Iterator[Stub]:
    with serving() as running:
        yield running
