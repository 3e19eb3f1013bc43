"""Our static and vendored browser files, answered from memory.

Quart's `send_file` reads through aiofiles, which opens the file in a thread: a request cancelled while that open
is under way (a browser that navigates on before a script arrived) leaves the thread's file unclosed, a
ResourceWarning. These files are few and small, so each is read once, synchronously, and kept as bytes.
"""

from __future__ import annotations

import hashlib
import mimetypes
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

from quart import Response, request
from werkzeug.exceptions import NotFound
from werkzeug.security import safe_join

_DEFAULT_MIMETYPE = "application/octet-stream"


@dataclass(frozen=True, slots=True)
class _Loaded:
    content: bytes
    etag: str
    mimetype: str
    modified: datetime


@lru_cache(maxsize=256)
def _load(path: Path, modified_ns: int, size: int) -> _Loaded:
    # Keyed by modification time and size as well, so an edited file is read again (a `vouch serve` in development).
    content = path.read_bytes()
    mimetype = mimetypes.guess_type(path.name)[0] or _DEFAULT_MIMETYPE
    modified = datetime.fromtimestamp(modified_ns / 1e9, UTC)
    return _Loaded(content, hashlib.sha256(content).hexdigest()[:32], mimetype, modified)


def _current(path: Path) -> _Loaded | None:
    # A stat per request (microseconds, the page cache's) is what notices an edit; reads happen once per version.
    try:
        found = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return _load(path, found.st_mtime_ns, found.st_size) if stat.S_ISREG(found.st_mode) else None


async def file_response(path: Path, *, max_age: int | None = None) -> Response:
    """The file at `path` with an ETag and Last-Modified, 304 to a matching conditional request; 404 if absent."""
    loaded = _current(path)
    if loaded is None:
        raise NotFound()
    response = Response(loaded.content, mimetype=loaded.mimetype)
    response.set_etag(loaded.etag)
    response.last_modified = loaded.modified
    response.cache_control.public = True
    if max_age is not None:
        response.cache_control.max_age = max_age
    return await response.make_conditional(request, accept_ranges=True, complete_length=len(loaded.content))


async def file_in_folder(folder: Path, name: str) -> Response:
    """`name` inside `folder`; a name that climbs out of it is not found."""
    joined = safe_join(str(folder), name)
    if joined is None:
        raise NotFound()
    return await file_response(Path(joined))
