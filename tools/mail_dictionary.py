"""Print a preset dictionary for the mail bodies (core/compressed_text.py), rendered from today's review mail
templates with neutral values: what every review mail shares (its layout, inline styles, fixed sentences) is in it,
and what differs from one mail to the next (names, arguments, tokens) is generic.

    .venv/bin/python -m tools.mail_dictionary > core/text_dictionaries/mail-2.txt

A dictionary in use is never edited or removed (the rows compressed with it need it to be read); when the templates
have changed enough to matter, make a new one with this and add it to core/compressed_text.py as the current one.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

from review.notify import review_mail_bodies


def rendered() -> str:
    base = "http://127.0.0.1:8000"
    context = {
        "execution": SimpleNamespace(
            task_name="Write the release notes",
            task_description='Write a note called "notes.md" saying "the changes of this release".',
            reads_comments=False,
        ),
        "checkpoint": SimpleNamespace(
            stage="Write", attempt=2, description="the note", verification_question="Write it?"
        ),
        "next_action": {
            "instruction": 'Write a note called "notes.md" saying "the changes of this release"',
            "tool": "write_file",
            "editable": True,
        },
        "arguments": [("path", "notes.md"), ("content", "the changes of this release")],
        "chat_url": f"{base}/chat/exe_0000000000000000000000000?token=0000000000000000&rt=000000000000000000000",
        "approve_url": f"{base}/review/link/0000000000000000000000000000000000000000000",
        "reject_url": f"{base}/review/link/0000000000000000000000000000000000000000000",
        "reply_token": "0000000000000000",
        "hours": 72,
        "inbox_url": f"{base}/review/inbox/chk_0000000000000000000000000",
        "replies": True,
        "grading": False,
    }
    # zlib reaches strings at the end of a dictionary at the least cost: the HTML, most of a mail's bytes, goes last.
    text, html = review_mail_bodies(context)
    return text + html


if __name__ == "__main__":
    sys.stdout.write(rendered())
