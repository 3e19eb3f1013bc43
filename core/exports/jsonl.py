"""JSON Lines: one JSON object per run (core/exports/runs.py `run_record`), a line each, in the suite's order."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from core.exports.runs import ExportRun, export_time, load_runs, run_record


async def jsonl_export(session: AsyncSession, runs: Sequence[ExportRun]) -> AsyncIterator[bytes]:
    """The runs as JSON Lines (UTF-8), one line per run, yielded a line at a time."""
    async for loaded in load_runs(session, runs, now=export_time()):
        # ensure_ascii=False: UTF-8 as JSON Lines asks; a U+2028 inside a string stays inside its line.
        yield (json.dumps(run_record(loaded), ensure_ascii=False, separators=(",", ":")) + "\n").encode()
