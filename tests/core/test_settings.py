"""core.settings.load_settings: defaults, URL normalisation, the secret key file, refusals."""

from __future__ import annotations

import dataclasses
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from core.settings import Settings, SettingsError, deprecation_warnings, load_settings, normalise_database_url


def env_in(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"VOUCH_DATA_DIR": str(tmp_path / "data"), **extra}


def test_defaults(tmp_path: Path) -> None:
    settings = load_settings(env_in(tmp_path))
    data_dir = (tmp_path / "data").resolve()
    assert settings.data_dir == data_dir
    assert data_dir.is_dir()
    assert settings.database_url == f"sqlite+aiosqlite:///{data_dir / 'vouch.sqlite3'}"
    assert settings.is_sqlite
    assert settings.agent_model == "offline"
    assert settings.redis_url is None
    assert settings.smtp_url is None
    assert settings.base_url is None
    assert settings.worker_lease_seconds == 30.0
    assert settings.worker_poll_seconds == 5.0
    assert settings.worker_concurrency == 8


def test_load_settings_reads_only_the_given_mapping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOUCH_AGENT_MODEL", "from-os-environ")
    assert load_settings(env_in(tmp_path)).agent_model == "offline"


def test_values_from_the_environment(tmp_path: Path) -> None:
    settings = load_settings(
        env_in(
            tmp_path,
            VOUCH_DATABASE_URL="postgresql://u:p@db.example:5432/vouch",
            VOUCH_REDIS_URL="redis://127.0.0.1:6379/0",
            VOUCH_BASE_URL="https://vouch.example.com/",
            VOUCH_AGENT_MODEL="openai:gpt-4o",
            VOUCH_SMTP_URL="smtp://mail.example.com:2525",
            VOUCH_MAIL_FROM="Reviews <reviews@example.com>",
            VOUCH_WORKER_LEASE_SECONDS="12.5",
            VOUCH_WORKER_POLL_SECONDS="0.5",
            VOUCH_WORKER_CONCURRENCY="3",
        )
    )
    assert settings.database_url == "postgresql+asyncpg://u:p@db.example:5432/vouch"
    assert not settings.is_sqlite
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.base_url == "https://vouch.example.com"
    assert settings.agent_model == "openai:gpt-4o"
    assert settings.smtp_url == "smtp://mail.example.com:2525"
    assert settings.mail_from == "Reviews <reviews@example.com>"
    assert settings.worker_lease_seconds == 12.5
    assert settings.worker_poll_seconds == 0.5
    assert settings.worker_concurrency == 3


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u@h/db", "postgresql+asyncpg://u@h/db"),
        ("postgres://u@h/db", "postgresql+asyncpg://u@h/db"),
        ("postgresql+asyncpg://u@h/db", "postgresql+asyncpg://u@h/db"),
        ("sqlite:////var/lib/vouch/v.db", "sqlite+aiosqlite:////var/lib/vouch/v.db"),
        ("sqlite:///relative.db", "sqlite+aiosqlite:///relative.db"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite:///x.db"),
    ],
)
def test_database_url_normalisation(given: str, expected: str) -> None:
    assert normalise_database_url(given) == expected


@pytest.mark.parametrize(
    "url", ["mysql://u@h/db", "postgresql+psycopg://u@h/db", "sqlite+pysqlite:///x.db", "vouch.sqlite3"]
)
def test_unsupported_database_url_is_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(SettingsError, match="VOUCH_DATABASE_URL"):
        load_settings(env_in(tmp_path, VOUCH_DATABASE_URL=url))


def test_secret_key_is_generated_once_with_owner_only_mode(tmp_path: Path) -> None:
    first = load_settings(env_in(tmp_path))
    key_file = tmp_path / "data" / "secret_key"
    assert key_file.is_file()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert len(first.secret_key) >= 32
    assert key_file.read_bytes().strip() == first.secret_key
    second = load_settings(env_in(tmp_path))
    assert second.secret_key == first.secret_key
    other = load_settings({"VOUCH_DATA_DIR": str(tmp_path / "elsewhere")})
    assert other.secret_key != first.secret_key
    assert sorted(p.name for p in (tmp_path / "data").iterdir() if "secret" in p.name) == ["secret_key"]


def test_processes_starting_at_once_share_one_secret_key(tmp_path: Path) -> None:
    env = env_in(tmp_path)
    with ThreadPoolExecutor(max_workers=8) as pool:
        keys = {s.secret_key for s in pool.map(lambda _: load_settings(env), range(16))}
    assert len(keys) == 1
    assert keys == {(tmp_path / "data" / "secret_key").read_bytes().strip()}


def test_secret_key_from_environment_wins_and_writes_no_file(tmp_path: Path) -> None:
    secret = "s" * 32
    settings = load_settings(env_in(tmp_path, VOUCH_SECRET_KEY=secret))
    assert settings.secret_key == secret.encode()
    assert not (tmp_path / "data" / "secret_key").exists()


def test_short_secret_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="VOUCH_SECRET_KEY"):
        load_settings(env_in(tmp_path, VOUCH_SECRET_KEY="s" * 31))


def test_empty_secret_key_file_is_refused(tmp_path: Path) -> None:
    # A key file truncated by a crash must not silently become an empty HMAC key.
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "secret_key").write_bytes(b"\n")
    with pytest.raises(SettingsError, match="secret_key"):
        load_settings(env_in(tmp_path))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("VOUCH_WORKER_LEASE_SECONDS", "thirty"),
        ("VOUCH_WORKER_LEASE_SECONDS", "0.5"),
        ("VOUCH_WORKER_LEASE_SECONDS", "nan"),
        ("VOUCH_WORKER_LEASE_SECONDS", "inf"),
        ("VOUCH_WORKER_POLL_SECONDS", "-1"),
        ("VOUCH_WORKER_POLL_SECONDS", "NaN"),
        ("VOUCH_WORKER_CONCURRENCY", "0"),
        ("VOUCH_WORKER_CONCURRENCY", "many"),
        ("VOUCH_WORKER_CONCURRENCY", "inf"),
        ("VOUCH_AGENT_MAX_STEPS", "0"),
        ("VOUCH_AGENT_MAX_TOKENS", "lots"),
        ("VOUCH_AGENT_REQUEST_RETRIES", "-1"),
    ],
)
def test_bad_numbers_are_refused(tmp_path: Path, name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        load_settings(env_in(tmp_path, **{name: value}))


def test_agent_budgets(tmp_path: Path) -> None:
    settings = load_settings(
        env_in(
            tmp_path,
            VOUCH_AGENT_BASE_URL="http://127.0.0.1:11434/v1/",
            VOUCH_AGENT_MAX_STEPS="7",
            VOUCH_AGENT_MAX_SECONDS="60",
            VOUCH_AGENT_MAX_TOKENS="5000",
        )
    )
    assert settings.agent_base_url == "http://127.0.0.1:11434/v1"
    assert (settings.agent_max_steps, settings.agent_max_seconds, settings.agent_max_tokens) == (7, 60.0, 5000)


def test_the_webhook_and_agent_allow_lists_are_separate_and_take_ports(tmp_path: Path) -> None:
    settings = load_settings(
        env_in(
            tmp_path,
            VOUCH_WEBHOOK_ALLOWLIST=" 127.0.0.1/8, 10.1.2.3 ,fd00::/8, 127.0.0.1:9000, 10.0.0.0/8:443, [::1]:8080",
            VOUCH_AGENT_HTTP_ALLOWLIST="192.168.1.0/24:8443,[fd00::]/8:80",
        )
    )
    # Normalised: host bits dropped, a bare address is its own /32 (/128); without a port, any port.
    assert [str(entry) for entry in settings.webhook_allowlist] == [
        "127.0.0.0/8", "10.1.2.3/32", "fd00::/8", "127.0.0.1/32:9000", "10.0.0.0/8:443", "[::1/128]:8080",
    ]  # fmt: skip
    assert [str(entry) for entry in settings.agent_http_allowlist] == ["192.168.1.0/24:8443", "[fd00::/8]:80"]
    assert load_settings(env_in(tmp_path)).agent_http_allowlist == ()


def test_the_old_outbound_allow_list_applies_to_webhooks_only(tmp_path: Path) -> None:
    settings = load_settings(
        env_in(tmp_path, VOUCH_OUTBOUND_ALLOWLIST="127.0.0.1", VOUCH_WEBHOOK_ALLOWLIST="10.0.0.0/8:443")
    )
    assert [str(entry) for entry in settings.webhook_allowlist] == ["10.0.0.0/8:443", "127.0.0.1/32"]
    assert settings.agent_http_allowlist == ()
    [warning] = deprecation_warnings(env_in(tmp_path, VOUCH_OUTBOUND_ALLOWLIST="127.0.0.1"))
    assert "VOUCH_OUTBOUND_ALLOWLIST" in warning and "VOUCH_WEBHOOK_ALLOWLIST" in warning
    assert deprecation_warnings(env_in(tmp_path, VOUCH_WEBHOOK_ALLOWLIST="127.0.0.1")) == []


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("localhost", "'localhost' is not an address or network"),
        ("127.0.0.1:0", "port 0 is not from 1 to 65535"),
        ("127.0.0.1:65536", "port 65536 is not from 1 to 65535"),
        ("127.0.0.1:http", "'http' is not a port number"),
        ("10.0.0.0/33", "'10.0.0.0/33' is not an address or network"),
        ("[::1", "'\\[::1' has no closing bracket"),
        ("[127.0.0.1]:80", "brackets are for IPv6"),
        ("[::1]8080", "':port' must follow"),
    ],
)
@pytest.mark.parametrize("name", ["VOUCH_WEBHOOK_ALLOWLIST", "VOUCH_AGENT_HTTP_ALLOWLIST", "VOUCH_OUTBOUND_ALLOWLIST"])
def test_bad_allow_list_entries_are_refused(tmp_path: Path, name: str, value: str, why: str) -> None:
    with pytest.raises(SettingsError, match=f"{name}: .*{why}"):
        load_settings(env_in(tmp_path, **{name: f"10.0.0.1, {value}"}))


def test_bad_base_url_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="VOUCH_BASE_URL"):
        load_settings(env_in(tmp_path, VOUCH_BASE_URL="vouch.example.com"))


def test_settings_are_frozen(tmp_path: Path) -> None:
    settings = load_settings(env_in(tmp_path))
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.agent_model = "other"  # type: ignore[misc]
    changed = settings.with_changes(agent_model="other")
    assert isinstance(changed, Settings)
    assert changed.agent_model == "other"
    assert settings.agent_model == "offline"
