"""Deterministic planner for Vouch's built-in *offline* agent.

The offline agent uses no network and no language model.  It splits the task
description (plain English) into clauses and turns each clause into steps from
the vocabulary below.  It never guesses: a clause it does not understand goes
to ``Plan.unrecognised`` and produces no step.  Matching ignores case, and
leading fillers such as "please", "also", "next" or "first," are skipped.

Clauses
    A new clause starts at a line break, at ``;``, at a sentence end (``.``,
    ``!`` or ``?`` followed by a space and a capital letter or by the end of
    the text), before "then", "and then", "after that", "afterwards" and
    "finally", and before a verb of the vocabulary that follows ", ", " and "
    or a sentence end.  Quoted text ("...", '...' or curly double quotes) is
    never split, nor are e-mail addresses and decimals like ``2.5``.  List
    markers (``1.``, ``2)``, ``-``, ``*``) are dropped.

The agent never makes content up: an instruction that needs text the task does
not give (a mail without a body, a note without its text, a summary of
something other than the work) is unrecognised, like one it cannot parse.

``send_email``
    ``send an email (e-mail, mail, message) to ADDRESS [with subject "S"]
    and body "B" | saying "B" | that says "B"``; "email ADDRESS" and
    "write an email to ADDRESS" work too.  Each address outside quotes gets
    its own step ("to a@x.com and b@y.com"), lower-cased.  An unclaimed quoted
    text becomes the body.  No address, or no body: unrecognised.
    args: ``to``, ``subject`` (default "Message from Vouch": a label, not
    content), ``body``.
``write_file``
    ``write (save, create) a note/file [named "NAME" | called NAME | NAME.ext]
    saying "TEXT" | with "TEXT" | containing "TEXT"``.  The name is made
    safe: characters other than letters, digits, ``.``, ``_`` and ``-`` become
    ``_`` (so no ``/``), ``..`` and leading dots go; default ``notes.md``.
    No text: unrecognised.  args: ``path``, ``content``.
``summarise``
    ``summarise``, ``summarize``, ``sum up``, ``write a summary`` or ``write
    a report``, alone or about the work ("summarise what you did", "... the
    results", "... everything", "a summary of the work").  It summarises
    the steps taken; a summary of anything else ("summarise this text: ...",
    "summarise the reviews") is unrecognised.  args: ``{}``.
``wait``
    ``wait N seconds`` / ``wait N minutes`` / ``pause for N s``; N may be a
    decimal, no unit means seconds, at most 300 seconds.  args: ``seconds``.

Unquoted text after "saying", "that says" or "containing" runs to the end of
the clause.

Checkpoints (``place_checkpoints``)
    Each caller checkpoint guards one step, or the finish; no step is guarded
    by two.  Its stage, description and verification question are searched,
    in three passes, each in checkpoint order:

    1. Names: a checkpoint naming what a step acts on guards the first such
       step not yet guarded.  A mail step is named by its address or a word
       of its local part ("press" for press@acme.com, "board" for
       board@acme.com), a file step by its path or the path's stem ("plan"
       for plan.md); words shorter than three letters do not count.
    2. Tools: a checkpoint using a word for a tool (send_email: mail, email,
       e-mail, send, message, recipient, notify; write_file: write, file,
       note, save, document; summarise: summary, summarise, summarize,
       report; wait: wait, pause; plain inflections such as "emails" or
       "saved" count) guards the first unguarded step of that tool; if every
       such step is guarded already, it guards the finish.
    3. The rest guard the first unguarded step after the step guarded by the
       checkpoint before them (the first unguarded step for the first one),
       or the finish once no step is left.

    So two checkpoints that both mention mail guard two different mail steps,
    in order ("OK to tell the board?" the board's mail, "OK to tell the
    press?" the press's), and a checkpoint is only ever passed before the step
    it guards (index ``len(steps)`` is the finish).  Indices may go back: a
    checkpoint is due when the agent reaches its step, whatever its position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

DEFAULT_SUBJECT = "Message from Vouch"
DEFAULT_PATH = "notes.md"
MAX_WAIT_SECONDS = 300.0


@dataclass(frozen=True)
class PlannedStep:
    tool: str
    args: dict[str, Any]
    instruction: str


@dataclass(frozen=True)
class Plan:
    steps: tuple[PlannedStep, ...]
    unrecognised: tuple[str, ...]


@dataclass(frozen=True)
class CheckpointSpec:
    stage: str
    description: str
    verification_question: str


_CLOSERS = {'"': '"', "\u201c": "\u201d", "'": "'", "\u2018": "\u2019"}
# Quoted strings are swapped for these markers so that no pattern looks inside them.
_MARK = r"\x00(\d+)\x00"
_QUOTED = r"(\x00\d+\x00)"
_VERBS = r"(?:please\s+)?(?:send|e-?mail|mail|write|save|create|summari[sz]e|sum\s+up|wait|pause)\b"
_SPLIT = re.compile(
    r"[;\n]|[.!?\x01]+(?:\s+(?=[A-Z\x00])|\s*$)"
    r"|(?:,\s*|\s+)(?=(?i:and\s+then|then|after\s+that|afterwards|finally)\b,?\s+[\w\x00])"
    rf"|(?:,\s*(?i:and\s+)?|\s+(?i:and)\s+|[.!?\x01]+\s+)(?=(?i:{_VERBS}))"
)
_LIST_MARKER = re.compile(r"(?m)^[ \t]*(?:\d+[.)]|[-*+\u2022])[ \t]+|(?<=[.!?])[ \t]+\d+[.)][ \t]+")
_CONNECTIVE = re.compile(r"^(?:(?:and\s+then|then|after\s+that|afterwards|finally|and)\b[\s,:]*)+", re.I)
_FILLER = re.compile(
    r"^(?:(?:please|kindly|also|now|next|just|first(?:ly)?|second(?:ly)?|third(?:ly)?|last(?:ly)?"
    r"|(?:can|could|would|will)\s+you|i\s+(?:want|need|would\s+like)\s+you\s+to|go\s+ahead\s+and)\b[\s,:]*)+",
    re.I,
)
_WAIT = re.compile(
    r"(?:wait|pause|sleep)(?:\s+for)?\s+(\d+(?:\.\d+)?|\.\d+)\s*(seconds?|secs?|s|minutes?|mins?|m)?", re.I
)
_SUMMARY = re.compile(
    r"(?:summari[sz]e|sum\s+up|(?:write|produce|prepare|create|make|give|generate)\s+"
    r"(?:(?:a|an|the|me|us|short|brief|quick|final)\s+)*(?:summary|report))\b",
    re.I,
)
# What a summary may be about: the work itself (the only thing the summarise tool can summarise).
_SUMMARY_OF_WORK = re.compile(
    r"\s*(?:(?:of|on|about)\s+)?(?:(?:all\s+)?(?:the|your|my|our|this)\s+)?"
    r"(?:(?:work|results?|steps?|progress|run|task|outcome|everything|it(?:\s+all)?|all)"
    r"|what\s+(?:you(?:\s+have|'ve)?|was|has\s+been|you\s+did)\s*(?:done|did)?)?\s*",
    re.I,
)
_EMAIL_VERB = re.compile(r"(?:send|e-?mail|mail|message|notify|(?:write|compose)\s+(?:an?\s+)?e-?mail)\b", re.I)
_ADDRESS = re.compile(
    r"(?<![\w.%+-])[\w%+-]+(?:\.[\w%+-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,}(?![\w-])"
)
_SUBJECT = re.compile(rf"\b(?:subject(?:\s+line)?|titled|entitled)\s*:?\s*{_QUOTED}", re.I)
_BODY = re.compile(
    r"\b(?:(?:and|with)\s+(?:the\s+|a\s+)?(?:body|text|content|message)|saying|(?:that|which)\s+says|reading)"
    rf"\s*:?\s*(?:{_QUOTED}|(.+))",
    re.I,
)
_WRITE_VERB = re.compile(r"(?:write|save|create|make|store)\b", re.I)
_WRITE_OBJECT = re.compile(r"\b(?:notes?|files?|documents?|memo)\b", re.I)
_CONTENT = re.compile(
    r"\b(?:(?:saying|containing|(?:that|which)\s+says|reading|with\s+(?:the\s+)?(?:content|contents|text))"
    rf"\s*:?\s*(?:{_QUOTED}|(.+))|\bwith\s+{_QUOTED})",
    re.I,
)
_NAME_QUOTED = re.compile(rf"\b(?:named|called|titled|as|to|in|into)\s+(?:the\s+)?(?:file\s+)?{_QUOTED}", re.I)
_NAME_BARE = re.compile(
    r"\b(?:named|called)\s+([^\s,\x00]+)|(?<![\w@.\x00])([\w./-]*\.[A-Za-z][A-Za-z0-9]{0,9})(?![\w@.-])", re.I
)
_TOOL_WORDS = {
    "send_email": ("mail", "email", "e-mail", "send", "message", "recipient", "notify", "notified", "sent"),
    "write_file": ("write", "file", "note", "save", "document", "written", "wrote"),
    "summarise": ("summary", "summaries", "summarise", "summarize", "report"),
    "wait": ("wait", "pause"),
}


def _mask_quotes(text: str) -> tuple[str, list[tuple[str, str]]]:
    """Replace each quoted string by a marker; return the text and (original, inner) pairs."""
    out: list[str] = []
    quotes: list[tuple[str, str]] = []
    i = 0
    while i < len(text):
        ch, end = text[i], -1
        closer = _CLOSERS.get(ch)
        if closer is not None:
            line_end = text.find("\n", i)
            line_end = len(text) if line_end < 0 else line_end
            apostrophe = ch in "'\u2018"
            # An apostrophe inside a word ("don't") neither opens nor closes a quote.
            if not (apostrophe and i > 0 and text[i - 1].isalnum()):
                j = text.find(closer, i + 1, line_end)
                while apostrophe and j >= 0 and j + 1 < len(text) and text[j + 1].isalnum():
                    j = text.find(closer, j + 1, line_end)
                end = j
        if end < 0:
            out.append(ch)
            i += 1
            continue
        # \x01 lets a quote ending in "." close the sentence too: saying "Done." Wait 1 s.
        out.append(f"\x00{len(quotes)}\x00" + ("\x01" if text[end - 1 : end] in (".", "!", "?") else ""))
        quotes.append((text[i : end + 1], text[i + 1 : end]))
        i = end + 1
    return "".join(out), quotes


def _sanitise_path(name: str) -> str:
    safe = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9._-]", "_", name.strip()))
    return safe.lstrip(".")[:128] or DEFAULT_PATH


def _plan_clause(clause: str, quotes: list[tuple[str, str]], instruction: str) -> list[PlannedStep]:
    """Steps for one masked clause; an empty list means the clause is unrecognised."""

    def unmask(text: str) -> str:
        return re.sub(_MARK, lambda m: quotes[int(m.group(1))][1], text).strip()

    def found(match: re.Match[str] | None, *groups: int) -> str | None:
        texts = [] if match is None else [unmask(match.group(g) or "") for g in groups]
        return next((t for t in texts if t), None)

    text = _FILLER.sub("", clause)
    marks = re.findall(_QUOTED, text)
    wait = _WAIT.fullmatch(text)
    if wait:
        unit = (wait.group(2) or "s").lower()
        seconds = float(wait.group(1)) * (60.0 if unit.startswith("m") else 1.0)
        return [PlannedStep("wait", {"seconds": min(seconds, MAX_WAIT_SECONDS)}, instruction)]
    summary = _SUMMARY.match(text)
    if summary:
        about_work = _SUMMARY_OF_WORK.fullmatch(text[summary.end() :])
        return [PlannedStep("summarise", {}, instruction)] if about_work else []
    if _EMAIL_VERB.match(text):
        subject_m, body_m = _SUBJECT.search(text), _BODY.search(text)
        subject, body = found(subject_m, 1), found(body_m, 1, 2)
        # An address inside an unquoted body ("saying ask b@y.com") is text, not a recipient.
        head = text if body_m is None else text[: body_m.start()] + " " + text[body_m.end() :]
        addresses = list(dict.fromkeys(a.lower() for a in _ADDRESS.findall(head)))
        claimed = {m.group(1) for m in (subject_m, body_m) if m and m.group(1)}
        spare = [n for n in marks if n not in claimed]
        if body is None and spare:
            body = unmask(spare[0])
        if not body:
            return []  # the body would be made up
        args = {"subject": subject or DEFAULT_SUBJECT, "body": body}
        return [PlannedStep("send_email", {"to": a, **args}, instruction) for a in addresses]
    if _WRITE_VERB.match(text) and (_WRITE_OBJECT.search(text) or _NAME_BARE.search(text)):
        content_m = _CONTENT.search(text)
        content = found(content_m, 1, 2, 3)
        # Look for the name outside the content so "saying see notes.md" keeps the default path.
        rest = text if content_m is None else text[: content_m.start()] + " " + text[content_m.end() :]
        name_m = _NAME_QUOTED.search(rest)
        name = found(name_m, 1)
        if name is None:
            bare = _NAME_BARE.search(rest)
            name = None if bare is None else bare.group(1) or bare.group(2)
        if content is None:
            claimed = {m.group(1) for m in (name_m,) if m}
            spare = [n for n in marks if n not in claimed]
            content = unmask(spare[0]) if spare else None
        if not content:
            return []  # the note's text would be made up
        path = _sanitise_path(name) if name else DEFAULT_PATH
        return [PlannedStep("write_file", {"path": path, "content": content}, instruction)]
    return []


def plan_task(description: str) -> Plan:
    """Plan the steps for ``description`` using the vocabulary in the module docstring."""
    masked, quotes = _mask_quotes(description.replace("\x00", "").replace("\x01", "").replace("\r", "\n"))
    steps: list[PlannedStep] = []
    unrecognised: list[str] = []
    for piece in _SPLIT.split(_LIST_MARKER.sub("\n", masked)):
        clause = _CONNECTIVE.sub("", piece.replace("\x01", "").strip(" \t\n,:")).rstrip(" \t,:.!?")
        if not _FILLER.sub("", clause):  # e.g. the "First" of "First, write a note"
            continue
        instruction = re.sub(_MARK, lambda m: quotes[int(m.group(1))][0], clause)
        planned = _plan_clause(clause, quotes, instruction)
        steps.extend(planned)
        if not planned:
            unrecognised.append(instruction)
    return Plan(steps=tuple(steps), unrecognised=tuple(unrecognised))


def _checkpoint_words(checkpoint: CheckpointSpec) -> tuple[str, set[str]]:
    """The checkpoint's text (lower case) and its words with their plain inflections undone."""
    text = f"{checkpoint.stage} {checkpoint.description} {checkpoint.verification_question}".lower()
    words = set(re.findall(r"[a-z0-9]+(?:-[a-z0-9]+)*", text))
    inflected = {w[: -len(s)] for w in words for s in ("s", "d", "ed", "ing") if w.endswith(s)}
    inflected |= {w[:-3] + "e" for w in words if w.endswith("ing")}
    return text, words | inflected


def _checkpoint_tools(words: set[str]) -> set[str]:
    return {tool for tool, keys in _TOOL_WORDS.items() if words.intersection(keys)}


def _names(step: PlannedStep) -> tuple[set[str], set[str]]:
    """What a checkpoint may call the step's object by: whole phrases, and single words."""
    if step.tool == "send_email":
        address = str(step.args["to"]).lower()
        local = address.partition("@")[0]
        return {address}, {w for w in re.split(r"[._+-]", local) if len(w) >= 3}
    if step.tool == "write_file":
        path = str(step.args["path"]).lower()
        stem = path.rsplit(".", 1)[0]
        return {path}, {w for w in re.split(r"[._-]", stem) if len(w) >= 3}
    return set(), set()


def _names_step(step: PlannedStep, text: str, words: set[str]) -> bool:
    phrases, keys = _names(step)
    return any(p in text for p in phrases) or bool(words.intersection(keys) - set().union(*_TOOL_WORDS.values()))


def place_checkpoints(steps: tuple[PlannedStep, ...], checkpoints: list[CheckpointSpec]) -> list[int]:
    """Index of the step each checkpoint guards, `len(steps)` for the finish (see the module docstring)."""
    finish = len(steps)
    placed: list[int | None] = [None] * len(checkpoints)
    guarded: set[int] = set()

    def bind(position: int, candidates: list[int]) -> None:
        index = next((i for i in candidates if i not in guarded), None)
        if index is not None:
            placed[position] = index
            guarded.add(index)

    seen = [_checkpoint_words(cp) for cp in checkpoints]
    for position, (text, words) in enumerate(seen):
        bind(position, [i for i, step in enumerate(steps) if _names_step(step, text, words)])
    for position, (_, words) in enumerate(seen):
        tools = _checkpoint_tools(words)
        if placed[position] is None and tools:
            bind(position, [i for i, step in enumerate(steps) if step.tool in tools])
            if placed[position] is None:
                placed[position] = finish
    for position in range(len(checkpoints)):
        if placed[position] is None:
            before = placed[position - 1] if position else None
            start = 0 if before is None else before + 1
            bind(position, list(range(start, finish)))
            if placed[position] is None:
                placed[position] = finish
    return [finish if index is None else index for index in placed]
