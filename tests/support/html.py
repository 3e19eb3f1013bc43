"""Checks on rendered HTML shared by the page tests."""

from __future__ import annotations

import re


def only_our_script_files(html: str) -> bool:
    """Every <script> on the page is an empty tag loading a file of this site: nothing inline, nothing injected."""
    tags = re.findall(r"<script\b[^>]*>(.*?)</script>", html, flags=re.S)
    ours = re.findall(r'<script\b[^>]*\bsrc="/(?!/)[^"]*"[^>]*></script>', html)
    return html.count("<script") == len(tags) == len(ours) and all(body == "" for body in tags)
