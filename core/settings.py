"""Settings, read from the environment once into one frozen object and passed down."""

from __future__ import annotations

import ipaddress
import math
import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from core.allowlist import AllowEntry, parse_allowlist
from core.model_profiles import ModelProfile, ProfileError, read_profiles


class SettingsError(ValueError):
    """An environment variable holds a value Vouch cannot use."""


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    database_url: str
    secret_key: bytes
    redis_url: str | None = None
    base_url: str | None = None
    agent_model: str = "offline"
    smtp_url: str | None = None
    mail_from: str = "Vouch <vouch@localhost>"
    worker_lease_seconds: float = 30.0
    worker_poll_seconds: float = 5.0
    worker_concurrency: int = 8
    # An external agent (agentModel "external") silent this long while not awaiting review fails `agent_lost`.
    external_idle_seconds: float = 3600.0
    # Spec §8: requests per key per window (GCRA: a burst of `rate_limit`, then one per window/limit).
    rate_limit: int = 100
    rate_limit_window_seconds: int = 60
    # Spec §8: executions queued, running or awaiting review at once, per key.
    concurrency_limit: int = 10
    # Anyone may make an account on the web sign-up page; off: operators create users with the CLI.
    open_signup: bool = False
    # How long the confirmation link mailed on an open sign-up works (once).
    signup_link_hours: float = 24.0
    # Issue 5: a reminder to the reviewer, then the backup reviewer, this long after a checkpoint starts waiting.
    review_reminder_minutes: float = 60.0
    review_escalation_minutes: float = 240.0
    # Issue 5: `host:port` the inbound SMTP listener for review replies binds (None: off), and how long
    # the Approve/Reject links of a review mail stay valid.
    inbound_smtp: str | None = None
    review_link_hours: float = 72.0
    # Issue 6: an OpenAI-compatible server's base URL for `openai:<model>` (Ollama, vLLM, llama.cpp, LiteLLM);
    # None: the provider's own variables (OPENAI_BASE_URL) or its public API.
    agent_base_url: str | None = None
    # Issue 20.6: the operator's named models (VOUCH_MODELS_FILE), which a task may choose by name.
    model_profiles: tuple[ModelProfile, ...] = ()
    # Per-execution budgets; exceeding one ends the run `failed` with the reason.
    agent_max_steps: int = 50
    agent_max_seconds: float = 1800.0
    agent_max_tokens: int = 200_000
    # One model request's time limit, and how often a transient provider error is retried (with backoff).
    agent_request_timeout_seconds: float = 120.0
    agent_request_retries: int = 4
    # Networks (each optionally on one port) that webhooks, and separately the agent's http_request tool, may
    # reach although private, loopback or link-local. Empty: only public addresses. Separate lists, so that a
    # local webhook receiver does not open the same host's other services to the agent.
    webhook_allowlist: tuple[AllowEntry, ...] = ()
    agent_http_allowlist: tuple[AllowEntry, ...] = ()
    # The (host, port) the web server of this process listens on (`vouch serve`, `vouch web`; set by the CLI,
    # not read from the environment): no agent tool may reach it, whatever its allow-list says.
    listen_address: tuple[str, int] | None = None
    # Issue 7: one webhook attempt's time limit.
    webhook_timeout_seconds: float = 15.0
    # Issue 7: a bearer token /metrics asks for (None: /metrics is open; keep it off the public network),
    # and the log format: `text` lines for people, `json` lines for collectors.
    metrics_token: str | None = None
    log_format: str = "text"
    # Issue 8: how long a web process may serve an API key (auth) or a status record from its cache without
    # reading the database. Changes reach every web process over the bus at once (revocation within one bus
    # hop); these bound how stale a process that could not hear the bus may be. 0 turns a cache off.
    auth_cache_seconds: float = 5.0
    status_cache_seconds: float = 5.0
    # Issue 23.6: where spans go over OTLP/HTTP (from OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
    # OTEL_EXPORTER_OTLP_ENDPOINT); None: no span is recorded or exported. The SDK reads the other OTEL_* itself.
    otel_traces_endpoint: str | None = None

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    def model_profile(self, name: str) -> ModelProfile | None:
        return next((profile for profile in self.model_profiles if profile.name == name), None)

    def with_changes(self, **changes: Any) -> Settings:
        return replace(self, **changes)

    def public_base_url(self) -> str | None:
        """Where the links this process hands out point: VOUCH_BASE_URL, else the address its web server listens
        on (a wildcard address by this machine's name); None where neither is known (a `vouch worker`)."""
        if self.base_url:
            return self.base_url
        if self.listen_address is None:
            return None
        host, port = self.listen_address
        if host in WILDCARD_HOSTS:
            host = socket.gethostname()
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    @property
    def secure_cookies(self) -> bool:
        """Whether browser cookies are `__Host-` and `Secure`: yes on https, and on http at a loopback address
        (browsers count those as secure); no on http anywhere else, where no browser would keep such a cookie."""
        base = self.public_base_url()
        if base is None:
            return True
        parts = urlsplit(base)
        return parts.scheme == "https" or is_loopback(parts.hostname or "")


WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


def is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def normalise_database_url(url: str) -> str:
    """Map the URLs operators write to the async drivers Vouch runs on."""
    for plain, driver in (
        ("postgres://", "postgresql+asyncpg://"),
        ("postgresql://", "postgresql+asyncpg://"),
        ("sqlite://", "sqlite+aiosqlite://"),
    ):
        if url.startswith(plain):
            return driver + url[len(plain) :]
    if url.startswith(("postgresql+asyncpg://", "sqlite+aiosqlite://")):
        return url
    raise SettingsError(f"VOUCH_DATABASE_URL: unsupported database URL scheme in {url.split('://')[0]!r}")


def _secret_key(raw: str | None, data_dir: Path) -> bytes:
    if raw:
        if len(raw) < 32:
            raise SettingsError("VOUCH_SECRET_KEY must be at least 32 characters")
        return raw.encode()
    path = data_dir / "secret_key"
    try:
        return _read_secret_key(path)
    except FileNotFoundError:
        pass
    data_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(48).encode()
    # Written whole to a private file, then linked into place: two processes starting at once
    # end up with the same key, and neither can read a half-written one.
    partial = data_dir / f".secret_key.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(key)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(partial, path)
        except FileExistsError:
            return _read_secret_key(path)
    finally:
        partial.unlink(missing_ok=True)
    return key


def _read_secret_key(path: Path) -> bytes:
    key = path.read_bytes().strip()
    if len(key) < 32:
        raise SettingsError(f"{path} holds no usable key (under 32 characters); delete it to generate a new one")
    return key


def _number(env: Mapping[str, str], name: str, default: float, minimum: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, not {raw!r}") from None
    if not math.isfinite(value):
        raise SettingsError(f"{name} must be a finite number, not {raw!r}")
    if value < minimum:
        raise SettingsError(f"{name} must be at least {minimum}")
    return value


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise SettingsError(f"{name} must be 1 or 0, not {raw!r}")


def _allowlist(env: Mapping[str, str], name: str) -> tuple[AllowEntry, ...]:
    try:
        return parse_allowlist(env.get(name) or "")
    except ValueError as exc:
        raise SettingsError(f"{name}: {exc}") from None


def deprecation_warnings(env: Mapping[str, str]) -> list[str]:
    """What the environment uses that is deprecated, one message each, for the start-up log."""
    if not (env.get("VOUCH_OUTBOUND_ALLOWLIST") or "").strip():
        return []
    return [
        "VOUCH_OUTBOUND_ALLOWLIST is deprecated: it now applies to webhooks only, as VOUCH_WEBHOOK_ALLOWLIST "
        "does (rename it); the agent's http_request tool reads VOUCH_AGENT_HTTP_ALLOWLIST"
    ]


def _log_format(env: Mapping[str, str]) -> str:
    raw = (env.get("VOUCH_LOG_FORMAT") or "text").strip().lower()
    if raw not in ("text", "json"):
        raise SettingsError(f"VOUCH_LOG_FORMAT must be text or json, not {raw!r}")
    return raw


def _model_profiles(env: Mapping[str, str], data_dir: Path) -> tuple[ModelProfile, ...]:
    named = env.get("VOUCH_MODELS_FILE") or ""
    path = Path(named).expanduser() if named else data_dir / "models.toml"
    if not path.is_file():
        if named:
            raise SettingsError(f"VOUCH_MODELS_FILE: {path} does not exist")
        return ()  # no profiles: tasks choose `offline` or `provider:model`
    try:
        return read_profiles(path)
    except ProfileError as exc:
        raise SettingsError(f"{path}: {exc}") from None


def _otel_traces_endpoint(env: Mapping[str, str]) -> str | None:
    """The OTLP/HTTP traces URL as the SDK's exporter resolves it, or None when traces are off."""
    if (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
        return None
    if (env.get("OTEL_TRACES_EXPORTER") or "otlp").strip().lower() == "none":
        return None
    endpoint = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or "").strip()
    if not endpoint:
        base = (env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip()
        if not base:
            return None
        endpoint = base + ("v1/traces" if base.endswith("/") else "/v1/traces")
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = (env.get(name) or "").strip()
        if protocol and protocol != "http/protobuf":
            raise SettingsError(f"{name}: Vouch exports spans over http/protobuf only, not {protocol!r}")
    if not endpoint.startswith(("http://", "https://")):
        raise SettingsError(f"the OTLP traces endpoint must start with http:// or https://, not {endpoint!r}")
    return endpoint


def database_location(env: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """The data directory and the database URL the environment names, touching nothing on disk."""
    env = os.environ if env is None else env
    data_dir = Path(env.get("VOUCH_DATA_DIR") or "./var").resolve()
    database_url = env.get("VOUCH_DATABASE_URL") or f"sqlite:///{data_dir / 'vouch.sqlite3'}"
    return data_dir, normalise_database_url(database_url)


def sqlite_path(database_url: str) -> Path | None:
    """The file of a SQLite database URL (None for another database, or one in memory)."""
    if not database_url.startswith("sqlite"):
        return None
    name = database_url.split(":///", 1)[1].split("?", 1)[0] if ":///" in database_url else ""
    return Path(name).resolve() if name and name != ":memory:" else None


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    data_dir, database_url = database_location(env)
    base_url = (env.get("VOUCH_BASE_URL") or "").rstrip("/") or None
    if base_url and not base_url.startswith(("http://", "https://")):
        raise SettingsError("VOUCH_BASE_URL must start with http:// or https://")
    if database_url.startswith("sqlite"):
        data_dir.mkdir(parents=True, exist_ok=True)
    return Settings(
        data_dir=data_dir,
        database_url=database_url,
        secret_key=_secret_key(env.get("VOUCH_SECRET_KEY"), data_dir),
        redis_url=env.get("VOUCH_REDIS_URL") or None,
        base_url=base_url,
        agent_model=env.get("VOUCH_AGENT_MODEL") or "offline",
        smtp_url=env.get("VOUCH_SMTP_URL") or None,
        mail_from=env.get("VOUCH_MAIL_FROM") or "Vouch <vouch@localhost>",
        worker_lease_seconds=_number(env, "VOUCH_WORKER_LEASE_SECONDS", 30.0, 1.0),
        worker_poll_seconds=_number(env, "VOUCH_WORKER_POLL_SECONDS", 5.0, 0.05),
        worker_concurrency=int(_number(env, "VOUCH_WORKER_CONCURRENCY", 8, 1)),
        external_idle_seconds=_number(env, "VOUCH_EXTERNAL_IDLE_SECONDS", 3600.0, 1.0),
        rate_limit=int(_number(env, "VOUCH_RATE_LIMIT", 100, 1)),
        rate_limit_window_seconds=int(_number(env, "VOUCH_RATE_LIMIT_WINDOW_SECONDS", 60, 1)),
        concurrency_limit=int(_number(env, "VOUCH_CONCURRENCY_LIMIT", 10, 1)),
        open_signup=_flag(env, "VOUCH_OPEN_SIGNUP"),
        signup_link_hours=_number(env, "VOUCH_SIGNUP_LINK_HOURS", 24.0, 0.01),
        review_reminder_minutes=_number(env, "VOUCH_REVIEW_REMINDER_MINUTES", 60.0, 0.0),
        review_escalation_minutes=_number(env, "VOUCH_REVIEW_ESCALATION_MINUTES", 240.0, 0.0),
        inbound_smtp=env.get("VOUCH_INBOUND_SMTP") or None,
        review_link_hours=_number(env, "VOUCH_REVIEW_LINK_HOURS", 72.0, 0.01),
        agent_base_url=(env.get("VOUCH_AGENT_BASE_URL") or "").rstrip("/") or None,
        model_profiles=_model_profiles(env, data_dir),
        agent_max_steps=int(_number(env, "VOUCH_AGENT_MAX_STEPS", 50, 1)),
        agent_max_seconds=_number(env, "VOUCH_AGENT_MAX_SECONDS", 1800.0, 1.0),
        agent_max_tokens=int(_number(env, "VOUCH_AGENT_MAX_TOKENS", 200_000, 1)),
        agent_request_timeout_seconds=_number(env, "VOUCH_AGENT_REQUEST_TIMEOUT_SECONDS", 120.0, 0.1),
        agent_request_retries=int(_number(env, "VOUCH_AGENT_REQUEST_RETRIES", 4, 0)),
        # The old shared list keeps working for webhooks alone (deprecation_warnings says so at start-up).
        webhook_allowlist=tuple(
            dict.fromkeys(_allowlist(env, "VOUCH_WEBHOOK_ALLOWLIST") + _allowlist(env, "VOUCH_OUTBOUND_ALLOWLIST"))
        ),
        agent_http_allowlist=_allowlist(env, "VOUCH_AGENT_HTTP_ALLOWLIST"),
        webhook_timeout_seconds=_number(env, "VOUCH_WEBHOOK_TIMEOUT_SECONDS", 15.0, 0.1),
        metrics_token=env.get("VOUCH_METRICS_TOKEN") or None,
        log_format=_log_format(env),
        auth_cache_seconds=_number(env, "VOUCH_AUTH_CACHE_SECONDS", 5.0, 0.0),
        status_cache_seconds=_number(env, "VOUCH_STATUS_CACHE_SECONDS", 5.0, 0.0),
        otel_traces_endpoint=_otel_traces_endpoint(env),
    )
