"""Vouch's reviewer inside agent frameworks: one module per framework, each behind an extra of its own
(`pip install 'vouch-client[langgraph]'`). `vouch_client` itself never imports them."""
