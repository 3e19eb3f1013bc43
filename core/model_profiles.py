"""Model profiles: the operator's named models (VOUCH_MODELS_FILE, default `<data dir>/models.toml`).

    [models.local]
    provider = "openai"            # any OpenAI-compatible server; or "anthropic"
    model = "llama3.1:8b"
    base_url = "http://127.0.0.1:11434/v1"
    api_key_env = "OLLAMA_API_KEY" # the variable that holds the key, never the key itself
    temperature = 0.2
    max_tokens = 2048
    input_usd_per_mtok = 0.0
    output_usd_per_mtok = 0.0

The file is read once, with the rest of the settings; anything wrong in it stops the start with one error naming
the file and the problem, rather than failing each task that names the profile later. Keys stay in the
environment: the file only names their variables, so it can be shared and committed.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OFFLINE = "offline"
# Not a model the service runs: the caller's own agent drives the execution over REST (api/external.py).
EXTERNAL = "external"
PROVIDERS = ("openai", "anthropic")
# No `:` (that is `provider:model`), nothing that needs quoting in a URL or a log line.
_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FIELDS = (
    "provider",
    "model",
    "base_url",
    "api_key_env",
    "temperature",
    "max_tokens",
    "input_usd_per_mtok",
    "output_usd_per_mtok",
)


class ProfileError(ValueError):
    """The models file cannot be used; the message says where and why (core/settings.py adds the file)."""


@dataclass(frozen=True)
class ModelProfile:
    name: str
    provider: str
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    # US dollars per million tokens; both or neither (a cost from half a price would be made up).
    input_usd_per_mtok: float | None = None
    output_usd_per_mtok: float | None = None

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float | None:
        """The price of one request at this profile's prices; None when the profile gives none."""
        if self.input_usd_per_mtok is None or self.output_usd_per_mtok is None:
            return None
        return (input_tokens * self.input_usd_per_mtok + output_tokens * self.output_usd_per_mtok) / 1_000_000


def model_name_problem(name: str, profiles: tuple[ModelProfile, ...]) -> str | None:
    """Why `name` is not a model a task may choose here, listing the ones it may; None when it is one."""
    if name in (OFFLINE, EXTERNAL) or any(profile.name == name for profile in profiles):
        return None
    provider, _, model = name.partition(":")
    if provider in PROVIDERS and model:
        return None
    named = f"a profile ({', '.join(p.name for p in profiles)}), " if profiles else ""
    return f"agent model must be {named}'offline', 'external', 'openai:<model>' or 'anthropic:<model>', not {name!r}"


def read_profiles(path: Path) -> tuple[ModelProfile, ...]:
    """The profiles in `path`; ProfileError says what is wrong (without the file's name)."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"cannot be read: {exc}") from None
    for key in document:
        if key != "models":
            raise ProfileError(f"unknown table {key!r}: profiles go in [models.<name>] tables")
    models = document.get("models", {})
    if not isinstance(models, dict):
        raise ProfileError("'models' must be a table of profiles, [models.<name>]")
    return tuple(_profile(name, fields) for name, fields in models.items())


def _profile(name: str, fields: Any) -> ModelProfile:
    where = f"[models.{name}]"
    if not isinstance(fields, dict):
        raise ProfileError(f"{where} must be a table of the profile's fields")
    if name == OFFLINE:
        raise ProfileError(f"{where}: 'offline' is the offline agent's name; choose another profile name")
    if name == EXTERNAL:
        raise ProfileError(f"{where}: 'external' names a caller's own agent; choose another profile name")
    if not _PROFILE_NAME.fullmatch(name):
        raise ProfileError(
            f"profile name {name!r} must be 1 to 64 letters, digits, '.', '_' or '-' (no ':'), starting with a "
            "letter or digit"
        )
    if "api_key" in fields:
        # Not echoed: it is most likely a real key.
        raise ProfileError(
            f"{where} api_key: never write a key in this file; put it in an environment variable and name that "
            "variable in api_key_env"
        )
    for key in fields:
        if key not in _FIELDS:
            raise ProfileError(f"{where} unknown field {key!r} (the fields are {', '.join(_FIELDS)})")
    provider = fields.get("provider")
    if provider not in PROVIDERS:
        shown = "missing" if provider is None else repr(provider)
        raise ProfileError(f"{where} provider must be 'openai' or 'anthropic', not {shown}")
    if "model" not in fields:
        raise ProfileError(f"{where} model is required (the provider's name for the model)")
    model = fields["model"]
    if not isinstance(model, str) or not model.strip():
        raise ProfileError(f"{where} model must be a non-empty string")
    input_price = _number(fields, "input_usd_per_mtok", where, 0.0, None, "a number of at least 0")
    output_price = _number(fields, "output_usd_per_mtok", where, 0.0, None, "a number of at least 0")
    if (input_price is None) != (output_price is None):
        raise ProfileError(f"{where} give both input_usd_per_mtok and output_usd_per_mtok, or neither")
    max_tokens = fields.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ProfileError(f"{where} max_tokens must be a whole number of at least 1")
    return ModelProfile(
        name=name,
        provider=provider,
        model=model,
        base_url=_base_url(fields.get("base_url"), where),
        api_key_env=_key_variable(fields.get("api_key_env"), where),
        temperature=_number(fields, "temperature", where, 0.0, 2.0, "a number from 0 to 2"),
        max_tokens=max_tokens,
        input_usd_per_mtok=input_price,
        output_usd_per_mtok=output_price,
    )


def _number(
    fields: dict[str, Any], key: str, where: str, low: float, high: float | None, rule: str
) -> float | None:
    value = fields.get(key)
    if value is None:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < low or (high is not None and value > high):
        raise ProfileError(f"{where} {key} must be {rule}, not {value!r}")
    return float(value)


def _base_url(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(r"https?://[^\s/?#]+[^\s]*", value):
        raise ProfileError(f"{where} base_url must be an http:// or https:// URL, not {value!r}")
    return value.rstrip("/")


def _key_variable(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _VARIABLE_NAME.fullmatch(value):
        # The value is not repeated: what fails this rule is most often the key itself.
        raise ProfileError(
            f"{where} api_key_env must name the environment variable that holds the key (letters, digits and "
            "'_', like OPENAI_API_KEY), not hold the key itself"
        )
    return value
