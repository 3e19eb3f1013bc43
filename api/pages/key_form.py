"""The new-key form: what the browser sent, checked into what `create_api_key` needs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from werkzeug.datastructures import MultiDict

from core.accounts import MAX_KEY_DAYS
from core.apikeys import SCOPES

EXPIRY_PRESETS = (7, 30, 60, 90)
DEFAULT_EXPIRY = "30"
ON_DATE = "date"
MAX_NAME = 100
MAX_DESCRIPTION = 500

SCOPE_HELP = {
    "eval:create": "Create and run evaluation tasks.",
    "eval:read": "Read execution status, checkpoints and metrics.",
    "eval:manage": "Full access: create, read, and decide checkpoints.",
}


@dataclass
class KeyForm:
    """The form's values (to show again after an error) and, per field, what is wrong."""

    name: str = ""
    description: str = ""
    scopes: list[str] = field(default_factory=list)
    expiry: str = DEFAULT_EXPIRY
    expires_on: str = ""
    errors: dict[str, str] = field(default_factory=dict)
    expires_at: datetime | None = None

    @classmethod
    def parse(cls, form: MultiDict[str, str], now: datetime) -> KeyForm:
        found = cls(
            name=form.get("name", "").strip(),
            description=form.get("description", "").strip(),
            scopes=[scope for scope in SCOPES if scope in form.getlist("scope")],
            expiry=form.get("expiry", DEFAULT_EXPIRY),
            expires_on=form.get("expires_on", "").strip(),
        )
        found._check(form.getlist("scope"), now)
        return found

    def _check(self, sent_scopes: list[str], now: datetime) -> None:
        if not self.name:
            self.errors["name"] = "Give the key a name, so you can tell it apart later."
        elif len(self.name) > MAX_NAME:
            self.errors["name"] = f"Keep the name to {MAX_NAME} characters."
        if len(self.description) > MAX_DESCRIPTION:
            self.errors["description"] = f"Keep the description to {MAX_DESCRIPTION} characters."
        if set(sent_scopes) - set(SCOPES):
            self.errors["scope"] = "Choose scopes from the list."
        elif not self.scopes:
            self.errors["scope"] = "Choose at least one scope."
        self._check_expiry(now)

    def _check_expiry(self, now: datetime) -> None:
        if self.expiry in {str(days) for days in EXPIRY_PRESETS}:
            self.expires_at = now + timedelta(days=int(self.expiry))
            return
        if self.expiry != ON_DATE:
            self.errors["expiry"] = "Choose when the key expires."
            return
        today = now.astimezone(UTC).date()
        try:
            chosen = date.fromisoformat(self.expires_on)
        except ValueError:
            self.errors["expiry"] = "Enter the expiry date as YYYY-MM-DD."
            return
        if not today < chosen <= today + timedelta(days=MAX_KEY_DAYS):
            self.errors["expiry"] = f"Choose a date from tomorrow to {MAX_KEY_DAYS} days from today."
            return
        # The key stops working as the chosen day begins (UTC); the page says so.
        self.expires_at = datetime.combine(chosen, time(0, 0), tzinfo=UTC)

    @property
    def ok(self) -> bool:
        return not self.errors
