"""A suite's runs exported for the tools evaluators already use (issue 23, item 6).

`GET /api/eval/suites/<id>/export?format=jsonl|csv|inspect` serves one of the writers below. Each takes a read
session and the suite's runs in order (`ExportRun`) and yields the file's bytes piece by piece, so the route hands
the iterator to its streaming response. Runs are read from the database a chunk at a time (core/exports/runs.py):
JSON Lines and CSV hold one chunk of runs at a time; the Inspect log holds its samples until Inspect's writer,
which takes the whole log, has written them (core/exports/inspect_log.py).

Nothing here imports Inspect AI until an Inspect log is asked for: web and worker processes start without it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from core.exports.csv_table import csv_export
from core.exports.inspect_log import inspect_export
from core.exports.jsonl import jsonl_export
from core.exports.runs import ExportRun, suite_export_runs

Writer = Callable[[AsyncSession, Sequence[ExportRun]], AsyncIterator[bytes]]


@dataclass(frozen=True)
class ExportFormat:
    """What the route needs to serve one format: the writer, the Content-Type and the file name's extension."""

    write: Writer
    media_type: str
    extension: str

    def filename(self, suite_id: str) -> str:
        return f"{suite_id}.{self.extension}"


# The `format` query parameter's values, in the order the documentation lists them.
EXPORT_FORMATS: dict[str, ExportFormat] = {
    "jsonl": ExportFormat(jsonl_export, "application/jsonl", "jsonl"),
    "csv": ExportFormat(csv_export, "text/csv; charset=utf-8", "csv"),
    # An Inspect `.eval` log is a zip archive (Inspect's default log format, which `inspect view` reads).
    "inspect": ExportFormat(inspect_export, "application/zip", "eval"),
}

__all__ = [
    "EXPORT_FORMATS", "ExportFormat", "ExportRun", "Writer", "csv_export", "inspect_export", "jsonl_export",
    "suite_export_runs",
]
