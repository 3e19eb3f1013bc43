"""Fixtures for the web pages: the app (no worker) and browsers over its test client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from quart import Quart

from api.app import create_app
from api.app_services import AppServices
from core.db import Database
from core.settings import Settings
from tests.web.browser import Browser, signed_in_browser


@dataclass
class Site:
    app: Quart
    settings: Settings

    @property
    def services(self) -> AppServices:
        found: AppServices = self.app.extensions["vouch"]
        return found

    @property
    def db(self) -> Database:
        return self.services.db

    def browser(self, addr: str = "198.51.100.7") -> Browser:
        return Browser(self.app, addr=addr)

    async def signed_in(self, email: str) -> tuple[Browser, str]:
        return await signed_in_browser(self.app, self.db, self.settings.secret_key, email)


@pytest.fixture
async def site(settings: Settings) -> AsyncIterator[Site]:
    app = create_app(settings, run_worker=False)
    async with app.test_app():
        yield Site(app, settings)
