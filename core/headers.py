"""Text that ends up in a mail header: one line, and one recipient per message.

A line break in a header value would start a new header (`Bcc:` smuggled in a subject); Python's email
package refuses such a value when the message is built, which is too late for the caller to hear of it.
So the rules live here and are applied where the text enters: the API (task names, checkpoint stages),
the agent's `send_email` tool, the review mail's subject, and once more by the mail dispatcher for rows
written before these rules existed.

"One line" refuses every control character, TAB included (a name has no use for one, and one rule is
easier to state than a list of exceptions): C0 (U+0000 to U+001F), DEL, C1 (U+0080 to U+009F, which holds
NEL, U+0085) and the Unicode line and paragraph separators U+2028 and U+2029; `str.splitlines`, which
the email package folds headers with, breaks lines at several of these.
"""

from __future__ import annotations

import re

from email_validator import EmailNotValidError, validate_email

_NOT_ONE_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_RUNS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def line_break_problem(value: str) -> str | None:
    """Why `value` is not one line of text, or None when it is."""
    found = _NOT_ONE_LINE.search(value)
    if found is None:
        return None
    return f"must be a single line without control characters (found U+{ord(found.group()):04X})"


def one_line(value: str) -> str:
    """`value` with every run of control characters replaced by one space: for text written before
    the rules above, which must still make a subject."""
    return _RUNS.sub(" ", value).strip()


def one_recipient(value: str, *, globally_deliverable: bool = True) -> str:
    """The one address `value` names (a display name is allowed and dropped), or ValueError saying why
    it is not exactly one valid address: a list (`a@x, b@y`) is refused, never split.

    `globally_deliverable=False` also takes names with no dot or of special use (`ops@mailhost`), for
    rows the dispatcher meets that an operator may have meant for an internal server."""
    problem = line_break_problem(value)
    if problem is not None:
        raise ValueError(f"the recipient {problem}")
    try:
        checked = validate_email(
            value.strip(),
            check_deliverability=False,
            allow_display_name=True,
            globally_deliverable=globally_deliverable,
            # `.test` and friends: an internal setup's names, as the lenient form is for.
            test_environment=not globally_deliverable,
        )
    except EmailNotValidError as exc:
        raise ValueError(f"the recipient {value!r} is not exactly one valid e-mail address ({exc})") from None
    return checked.normalized
