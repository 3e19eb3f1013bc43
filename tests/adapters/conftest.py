"""A real Vouch (web app and worker on a free port) for the adapters, as for the client's own tests."""

from tests.client.conftest import client_settings, vouch

__all__ = ["client_settings", "vouch"]
