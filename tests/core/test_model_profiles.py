"""Model profiles (issue 20.6): the operator's TOML file, read once at start-up into the settings, refused whole
with one clear error naming the file and the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.model_profiles import ModelProfile
from core.settings import SettingsError, load_settings

LOCAL = """
[models.local]
provider = "openai"            # any OpenAI-compatible server
model = "llama3.1:8b"
base_url = "http://127.0.0.1:11434/v1"
api_key_env = "OLLAMA_API_KEY"
temperature = 0.2
max_tokens = 2048
input_usd_per_mtok = 0.0
output_usd_per_mtok = 0.0

[models.claude]
provider = "anthropic"
model = "claude-3-5-haiku-latest"
"""


def env_in(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"VOUCH_DATA_DIR": str(tmp_path / "data"), **extra}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_profiles_are_read_from_the_data_directory_by_default(tmp_path: Path) -> None:
    write(tmp_path / "data" / "models.toml", LOCAL)
    settings = load_settings(env_in(tmp_path))
    assert settings.model_profiles == (
        ModelProfile(
            name="local",
            provider="openai",
            model="llama3.1:8b",
            base_url="http://127.0.0.1:11434/v1",
            api_key_env="OLLAMA_API_KEY",
            temperature=0.2,
            max_tokens=2048,
            input_usd_per_mtok=0.0,
            output_usd_per_mtok=0.0,
        ),
        ModelProfile(name="claude", provider="anthropic", model="claude-3-5-haiku-latest"),
    )
    assert settings.model_profile("claude") == settings.model_profiles[1]
    assert settings.model_profile("nothing") is None


def test_no_file_in_the_data_directory_means_no_profiles(tmp_path: Path) -> None:
    assert load_settings(env_in(tmp_path)).model_profiles == ()


def test_vouch_models_file_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "elsewhere.toml", LOCAL)
    write(tmp_path / "data" / "models.toml", "")  # not read: the variable wins
    settings = load_settings(env_in(tmp_path, VOUCH_MODELS_FILE=str(path)))
    assert [p.name for p in settings.model_profiles] == ["local", "claude"]


def test_a_named_file_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    with pytest.raises(SettingsError, match=f"VOUCH_MODELS_FILE: {missing} does not exist"):
        load_settings(env_in(tmp_path, VOUCH_MODELS_FILE=str(missing)))


_MINIMAL = '[models.m]\nprovider = "openai"\nmodel = "x"\n'


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[models.m\n", "not valid TOML"),
        ('[models.m]\nprovider = "mistral"\nmodel = "x"\n', "[models.m] provider must be 'openai' or 'anthropic'"),
        ('[models.m]\nprovider = "openai"\n', "[models.m] model is required"),
        ('[models.m]\nprovider = "openai"\nmodel = ""\n', "[models.m] model must be a non-empty string"),
        (_MINIMAL + 'api_key_env = "sk-proj-abc123"\n', "api_key_env must name the environment variable"),
        (_MINIMAL + 'api_key = "sk-proj-abc123"\n', "never write a key in this file"),
        (_MINIMAL + "temprature = 0.2\n", "[models.m] unknown field 'temprature'"),
        (_MINIMAL + "temperature = -1\n", "[models.m] temperature must be a number from 0 to 2"),
        (_MINIMAL + 'temperature = "hot"\n', "[models.m] temperature must be a number from 0 to 2"),
        (_MINIMAL + "max_tokens = 0\n", "[models.m] max_tokens must be a whole number of at least 1"),
        (_MINIMAL + "max_tokens = 1.5\n", "[models.m] max_tokens must be a whole number of at least 1"),
        (_MINIMAL + "input_usd_per_mtok = -3\n", "[models.m] input_usd_per_mtok must be a number of at least 0"),
        (_MINIMAL + "input_usd_per_mtok = 3\n", "give both input_usd_per_mtok and output_usd_per_mtok, or neither"),
        (_MINIMAL + 'base_url = "localhost:11434"\n', "[models.m] base_url must be an http:// or https:// URL"),
        ('[models.offline]\nprovider = "openai"\nmodel = "x"\n', "'offline' is the offline agent's name"),
        ('[models."a:b"]\nprovider = "openai"\nmodel = "x"\n', "profile name 'a:b' must be"),
        ('[model.m]\nprovider = "openai"\nmodel = "x"\n', "unknown table 'model'"),
        ('models = 3\n', "'models' must be a table of profiles"),
        ('[models]\nm = 3\n', "[models.m] must be a table"),
    ],
)
def test_a_bad_file_is_one_clear_start_up_error(tmp_path: Path, text: str, says: str) -> None:
    path = write(tmp_path / "models.toml", text)
    with pytest.raises(SettingsError) as raised:
        load_settings(env_in(tmp_path, VOUCH_MODELS_FILE=str(path)))
    message = str(raised.value)
    assert message.startswith(f"{path}: "), message
    assert says in message, message
    assert "sk-proj-abc123" not in message  # a key written by mistake is not echoed into logs


def test_profile_prices_give_a_cost_and_no_prices_give_none() -> None:
    priced = ModelProfile("p", "openai", "m", input_usd_per_mtok=3.0, output_usd_per_mtok=15.0)
    assert priced.cost_usd(1_000_000, 200_000) == pytest.approx(6.0)
    assert ModelProfile("q", "openai", "m").cost_usd(10, 10) is None
    free = ModelProfile("f", "openai", "m", input_usd_per_mtok=0.0, output_usd_per_mtok=0.0)
    assert free.cost_usd(10, 10) == 0.0  # a price the operator gave, not a guess


def test_the_documented_example_profiles_load(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "agents.md").read_text(encoding="utf-8")
    example = doc.split("## Model profiles", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    path = write(tmp_path / "models.toml", example)
    profiles = load_settings(env_in(tmp_path, VOUCH_MODELS_FILE=str(path))).model_profiles
    assert [p.name for p in profiles] == ["ollama", "vllm", "llamacpp", "lmstudio", "claude"]
    assert {p.base_url for p in profiles if p.provider == "openai"} == {
        "http://127.0.0.1:11434/v1", "http://127.0.0.1:8000/v1", "http://127.0.0.1:8080/v1", "http://127.0.0.1:1234/v1"
    }
