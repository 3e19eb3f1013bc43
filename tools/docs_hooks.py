"""MkDocs hook: the API reference pages, generated at build time from the app's own OpenAPI document.

`mkdocs.yml` names this file under `hooks:`. The document is built by the same code that serves
`GET /api/openapi.json` (api/openapi.py's `build_document`), with the settings' defaults, so the pages cannot
drift from the API and the build needs no network and no running service. Each operation gets a page, the
schemas one page, and the error page's table of problem codes is filled from `PROBLEM_CODES`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

from api.apidocs import ref_name, resolve_ref, type_text
from api.openapi import build_document
from api.openapi_answers import PROBLEM_CODES
from core.settings import Settings

API_DIR = "api"
NAV_TITLE = "API reference"
PROBLEM_TABLE = "<!-- generated: problem codes -->"

_CODE_SPAN = re.compile(r"(`[^`]*`)")


def _documented_settings() -> Settings:
    # The dataclass's defaults are what the document quotes (the limits); the paths and key are never read.
    return Settings(data_dir=Path("var"), database_url="sqlite:///var/vouch.sqlite3", secret_key=b"\0" * 32)


def _text(text: str) -> str:
    """The document's descriptions as Markdown: they already are, but `<` outside code must not become HTML."""
    parts = _CODE_SPAN.split(text)
    return "".join(
        part if part.startswith("`") else part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        for part in parts
    )


def _cell(text: str) -> str:
    return _text(" ".join(text.split())).replace("|", "\\|")


def _page_name(operation_id: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", operation_id).lower()


class Reference:
    """The reference pages of one document: `pages` maps a path under docs/ to its Markdown."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.schema_names = sorted(doc["components"]["schemas"], key=len, reverse=True)
        self.operations: list[tuple[str, str, str, dict[str, Any]]] = [
            (tag["name"], method, path, op)
            for tag in doc["tags"]
            for path, item in doc["paths"].items()
            for method, op in item.items()
            if op["tags"][0] == tag["name"]
        ]
        self.pages: dict[str, str] = {f"{API_DIR}/index.md": self._index(), f"{API_DIR}/schemas.md": self._schemas()}
        for _tag, method, path, op in self.operations:
            self.pages[self._op_path(op)] = self._operation(method, path, op)

    def _op_path(self, op: dict[str, Any]) -> str:
        return f"{API_DIR}/{_page_name(op['operationId'])}.md"

    def nav(self) -> list[Any]:
        sections: dict[str, list[Any]] = {}
        for tag, _method, _path, op in self.operations:
            sections.setdefault(tag, []).append({op["summary"]: self._op_path(op)})
        return [
            f"{API_DIR}/index.md",
            *({tag: items} for tag, items in sections.items()),
            {"Schemas": f"{API_DIR}/schemas.md"},
        ]

    def _typed(self, schema: dict[str, Any], from_dir: str = "") -> str:
        """A schema's type, with each component schema it names linked to its section of the schemas page."""
        text = type_text(schema).replace("|", "\\|")
        target = "schemas.md" if from_dir == API_DIR else f"{API_DIR}/schemas.md"
        pattern = r"\b(" + "|".join(map(re.escape, self.schema_names)) + r")\b"
        return re.sub(pattern, lambda m: f"[{m[1]}]({target}#{m[1].lower()})", text)

    def _index(self) -> str:
        info = self.doc["info"]
        lines = [
            f"# {NAV_TITLE}",
            "",
            f"*{info['title']} {info['version']}, OpenAPI {self.doc['openapi']}.* This reference is generated when "
            "the documentation is built, from the same code that serves `GET /api/openapi.json` (and the page "
            "`GET /api/docs` of a running service), with the default settings: a service configured otherwise "
            "quotes its own limits there.",
            "",
            _text(info["description"]),
            "",
            "## Operations",
            "",
            "| Method and path | Scope | Operation |",
            "|---|---|---|",
        ]
        for _tag, method, path, op in self.operations:
            scope = f"`{op['x-required-scope']}`" if "x-required-scope" in op else "none"
            link = f"[{op['summary']}]({_page_name(op['operationId'])}.md)"
            lines.append(f"| `{method.upper()} {path}` | {scope} | {link} |")
        lines += ["", "The request and answer bodies are on the [schemas](schemas.md) page.", ""]
        return "\n".join(lines)

    def _operation(self, method: str, path: str, op: dict[str, Any]) -> str:
        lines = [f"# {op['summary']}", "", f"`{method.upper()} {path}`", ""]
        if "x-required-scope" in op:
            lines += [f"**Scope:** `{op['x-required-scope']}` · **Operation id:** `{op['operationId']}`", ""]
        else:
            lines += [f"**Public** · **Operation id:** `{op['operationId']}`", ""]
        lines += [_text(op["description"]), ""]
        params = [resolve_ref(self.doc, item) for item in op.get("parameters", [])]
        if params:
            lines += ["## Parameters", "", "| Name | In | Type | Required | Description |", "|---|---|---|---|---|"]
            for p in params:
                required = "yes" if p.get("required") else "no"
                typed = self._typed(p["schema"], API_DIR)
                lines.append(f"| `{p['name']}` | {p['in']} | {typed} | {required} | {_cell(p['description'])} |")
            lines.append("")
        if "requestBody" in op:
            media = op["requestBody"]["content"]["application/json"]
            name = ref_name(media["schema"]["$ref"])
            lines += ["## Request body", "", f"`application/json`: [{name}](schemas.md#{name.lower()})", ""]
            for example in media.get("examples", {}).values():
                lines += [f"**Example: {example['summary']}**", "", "```json", json.dumps(example["value"], indent=2)]
                lines += ["```", ""]
        lines += ["## Answers", ""]
        for status, response in op["responses"].items():
            lines += self._answer(status, response)
        return "\n".join(lines)

    def _answer(self, status: str, response: dict[str, Any]) -> list[str]:
        lines = [f"### {status}", ""]
        codes: list[tuple[str, str]] = []
        for media_type, content in response.get("content", {}).items():
            shape = content["schema"]
            parts = shape.get("allOf", [shape])
            refs = [ref_name(part["$ref"]) for part in parts if "$ref" in part]
            body = f"[{refs[0]}](schemas.md#{refs[0].lower()})" if refs else type_text(shape)
            lines += [f"`{media_type}`: {body}", ""]
            codes = [(code, resolve_ref(self.doc, ex)["summary"]) for code, ex in content.get("examples", {}).items()]
        description = response["description"].split("\n\n")[0] if codes else response["description"]
        lines += [_text(description), ""]
        if codes:
            lines += ["| `code` | Meaning |", "|---|---|"]
            lines += [f"| `{code}` | {_cell(meaning)} |" for code, meaning in codes]
            lines.append("")
        headers = response.get("headers", {})
        if headers:
            shown = []
            for name, header in headers.items():
                always = bool(resolve_ref(self.doc, header).get("required"))
                shown.append(f"`{name}`" + ("" if always else " (sometimes)"))
            lines += ["Headers: " + ", ".join(shown), ""]
        return lines

    def _schemas(self) -> str:
        lines = [
            "# Schemas",
            "",
            "The bodies the API reads and answers with, from the document's `components.schemas`.",
            "",
        ]
        for name, schema in self.doc["components"]["schemas"].items():
            lines += [f"## {name} {{#{name.lower()}}}", ""]
            if schema.get("description"):
                lines += [_text(schema["description"]), ""]
            properties = schema.get("properties", {})
            if not properties:
                lines += [f"Type: {self._typed(schema, API_DIR)}", ""]
                continue
            required = set(schema.get("required", []))
            lines += ["| Field | Type | Required | Description |", "|---|---|---|---|"]
            for field, prop in properties.items():
                flag = "yes" if field in required else "no"
                lines.append(
                    f"| `{field}` | {self._typed(prop, API_DIR)} | {flag} | {_cell(prop.get('description', ''))} |"
                )
            lines.append("")
        return "\n".join(lines)


def problem_table() -> str:
    lines = ["| Status | `code` | Meaning |", "|---|---|---|"]
    for code, (status, meaning) in sorted(PROBLEM_CODES.items(), key=lambda item: item[1][0]):
        lines.append(f"| {status} | `{code}` | {_cell(meaning)} |")
    return "\n".join(lines)


_reference: Reference | None = None


def _current() -> Reference:
    global _reference
    if _reference is None:
        _reference = Reference(build_document(_documented_settings()))
    return _reference


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    global _reference
    _reference = None  # `mkdocs serve` rebuilds: read the code again
    for entry in config.nav or []:
        if isinstance(entry, dict) and NAV_TITLE in entry:
            entry[NAV_TITLE] = _current().nav()
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for path, markdown in _current().pages.items():
        files.append(File.generated(config, path, content=markdown))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    return markdown.replace(PROBLEM_TABLE, problem_table())
