"""The documentation site: it builds with `mkdocs build --strict`, and its generated API reference covers the app.

The reference pages are generated at build time from the app's OpenAPI document (tools/docs_hooks.py); these
tests build the site as CI does and read the HTML it wrote, so a route the reference misses, or a page whose link
breaks, fails here.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import pytest

from api.app import create_app
from core.errors import FailureCode
from core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
# The site is built once per worker that runs these: on one worker, once (pyproject's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("docs-site")
_IGNORED_METHODS = {"HEAD", "OPTIONS"}  # answered by Quart itself on every route
_OPERATION = re.compile(r"<code>(GET|POST|PUT|PATCH|DELETE) (/api/[^<\s]*)</code>")
# A row of the index's table of operations (its prose names routes too).
_INDEX_ROW = re.compile(r"<td><code>(GET|POST|PUT|PATCH|DELETE) (/api/[^<\s]*)</code></td>")


def _template(path: str) -> str:
    """`/a/<execution_id>` and `/a/{executionId}` both as `/a/{}`."""
    return re.sub(r"<[^>]+>|\{[^}]+\}", "{}", path)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return out


def _page(site: Path, path: str) -> str:
    return html.unescape((site / path / "index.html").read_text(encoding="utf-8"))


def test_the_api_reference_lists_every_api_route_of_the_app(site: Path, tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'v.db'}", secret_key=b"k" * 32))
    routed = {
        (method, _template(rule.rule))
        for rule in app.url_map.iter_rules()
        if rule.rule.startswith("/api/")
        for method in (rule.methods or set()) - _IGNORED_METHODS
    }
    index = {(method, _template(path)) for method, path in _INDEX_ROW.findall(_page(site, "api"))}
    assert index == routed
    # and each operation has a page of its own that names it
    pages = {
        (method, _template(path))
        for page in (site / "api").iterdir()
        if page.is_dir() and page.name != "schemas"
        for method, path in _OPERATION.findall(_page(site, f"api/{page.name}"))[:1]
    }
    assert pages == routed


def test_the_reference_pages_carry_the_schemas_and_every_problem_code(site: Path) -> None:
    from api.openapi_answers import PROBLEM_CODES
    from api.openapi_schemas import component_schemas

    schemas = _page(site, "api/schemas")
    for name in component_schemas():
        assert f'id="{name.lower()}"' in schemas, name
    errors = _page(site, "errors")
    for code in PROBLEM_CODES:
        assert f"<code>{code}</code>" in errors, code
    for failure in FailureCode:
        assert f"<code>{failure}</code>" in errors, failure


def test_every_vouch_variable_the_code_reads_is_in_the_configuration_table(site: Path) -> None:
    read = set()
    for package in ("core", "api", "agents", "review", "chat"):
        for source in (ROOT / package).rglob("*.py"):
            # OpenTelemetry's standard variables too (issue 23.6): those the code reads or says the SDK reads.
            read |= set(re.findall(r"(?:VOUCH|OTEL)_[A-Z_]+[A-Z]", source.read_text(encoding="utf-8")))
    configuration = _page(site, "configuration")
    assert read, "no variables found: the scan is broken"
    assert {name for name in read if f"<code>{name}</code>" not in configuration} == set()


def test_the_site_loads_nothing_from_another_site(site: Path) -> None:
    foreign = re.compile(r"<(?:script|link|img)\b[^>]*\b(?:src|href)=\"(?:https?:)?//", re.IGNORECASE)
    for page in site.rglob("*.html"):
        assert not foreign.search(page.read_text(encoding="utf-8")), page
    for sheet in site.rglob("*.css"):
        assert "fonts.googleapis" not in sheet.read_text(encoding="utf-8"), sheet
