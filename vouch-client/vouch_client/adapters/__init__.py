"""Adapters that put a reviewer in Vouch in front of an agent framework's risky steps.

Each is a module of its own with an optional extra (`pip install 'vouch-client[langgraph]'`, …), imported
only by name (`from vouch_client.adapters.pydantic_ai import answer_approvals`): `vouch_client` itself never loads
a framework.
"""
