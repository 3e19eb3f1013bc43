"""The kernel every part of Vouch stands on: settings, database, tables, bus, mail, CLI.

Nothing in here imports a sibling package (api, agents, review, chat).
"""
