"""Settings precedence (flags > env > .env > workspace toml > user toml), provider resolution, masking."""

from __future__ import annotations

from pathlib import Path

import pytest

from shou.config import describe, load_settings, mask, resolve_model
from shou.errors import ConfigError
from shou.trust import TrustStore


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    ws, cfg = tmp_path / "ws", tmp_path / "cfg"
    ws.mkdir()
    cfg.mkdir()
    return ws, cfg


def test_precedence_of_every_source(dirs: tuple[Path, Path]) -> None:
    ws, cfg = dirs
    (cfg / "shou.toml").write_text('model = "user-model"\nmax_steps = 7\ntool_timeout = 9\nrun_timeout = 11\n')
    (ws / "shou.toml").write_text('model = "ws-model"\nmax_steps = 8\ntool_timeout = 10\n')
    (ws / ".env").write_text("SHOU_MAX_STEPS=9\nSHOU_BASE_URL=http://dotenv/v1\nDEEPSEEK_API_KEY=from-dotenv-123456\n")
    for name in ("shou.toml", ".env"):  # trusted: the precedence of sensitive settings is what is tested here
        TrustStore(cfg).trust(ws / name, (ws / name).read_bytes())
    env = {"SHOU_CONFIG_DIR": str(cfg), "SHOU_BASE_URL": "http://env/v1"}
    s = load_settings({"workspace": ws, "model": "flag-model"}, env=env)
    assert s.model == "flag-model" and s.sources["model"] == "flag"
    assert s.max_steps == 9 and s.sources["max_steps"] == str(ws / ".env")
    assert s.tool_timeout == 10 and s.sources["tool_timeout"] == str(ws / "shou.toml")
    assert s.run_timeout == 11 and s.sources["run_timeout"] == str(cfg / "shou.toml")
    assert s.base_url == "http://env/v1" and s.sources["base_url"] == "environment"
    assert s.env["DEEPSEEK_API_KEY"] == "from-dotenv-123456"  # .env feeds provider keys too


def test_real_environment_beats_dotenv(dirs: tuple[Path, Path]) -> None:
    ws, cfg = dirs
    (ws / ".env").write_text("SHOU_MODEL=from-dotenv\n")
    s = load_settings({"workspace": ws}, env={"SHOU_CONFIG_DIR": str(cfg), "SHOU_MODEL": "from-env"})
    assert s.model == "from-env"


def test_bad_values_and_unknown_keys_name_the_source(dirs: tuple[Path, Path]) -> None:
    ws, cfg = dirs
    (ws / "shou.toml").write_text("max_stepz = 3\n")
    with pytest.raises(ConfigError, match=r"unknown setting.*max_stepz"):
        load_settings({"workspace": ws}, env={"SHOU_CONFIG_DIR": str(cfg)})
    (ws / "shou.toml").write_text("")
    with pytest.raises(ConfigError, match=r"max_steps.*environment"):
        load_settings({"workspace": ws}, env={"SHOU_CONFIG_DIR": str(cfg), "SHOU_MAX_STEPS": "lots"})


@pytest.mark.parametrize(
    ("env", "flags", "expected"),
    [
        (
            {"OPENAI_API_KEY": "sk-openai-123456"},
            {},
            ("openai", "gpt-4o-mini", "https://api.openai.com/v1", "OPENAI_API_KEY"),
        ),
        (
            {"DEEPSEEK_API_KEY": "sk-ds-1234567"},
            {},
            ("deepseek", "deepseek-chat", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
        ),
        (
            {"DASHSCOPE_API_KEY": "sk-qw-1234567"},
            {"model": "qwen:qwen-max"},
            ("qwen", "qwen-max", "https://dashscope.aliyuncs.com/compatible-mode/v1", "DASHSCOPE_API_KEY"),
        ),
        ({}, {"model": "ollama:llama3.2:3b"}, ("ollama", "llama3.2:3b", "http://localhost:11434/v1", "SHOU_API_KEY")),
        ({}, {"model": "llamacpp:any"}, ("llamacpp", "any", "http://localhost:8080/v1", "SHOU_API_KEY")),
        (
            {"OPENAI_API_KEY": "k" * 12, "OPENAI_BASE_URL": "http://proxy/v1"},
            {},
            ("openai", "gpt-4o-mini", "http://proxy/v1", "OPENAI_API_KEY"),
        ),
        (
            {},
            {"base_url": "http://my-server/v1/", "model": "mine"},
            ("custom", "mine", "http://my-server/v1", "SHOU_API_KEY"),
        ),
    ],
)
def test_provider_resolution(tmp_path: Path, env: dict, flags: dict, expected: tuple) -> None:
    s = load_settings({"workspace": tmp_path, **flags}, env={"SHOU_CONFIG_DIR": str(tmp_path), **env})
    cfg = resolve_model(s)
    assert (cfg.provider, cfg.model, cfg.base_url, cfg.key_setting) == expected


def test_no_model_explains_how_to_configure(tmp_path: Path) -> None:
    s = load_settings({"workspace": tmp_path}, env={"SHOU_CONFIG_DIR": str(tmp_path)})
    with pytest.raises(ConfigError) as e:
        resolve_model(s)
    assert "No model is configured" in str(e.value) and "OPENAI_API_KEY" in str(e.value)


def test_cloud_provider_without_key_names_the_variable(tmp_path: Path) -> None:
    s = load_settings(
        {"workspace": tmp_path, "model": "deepseek:deepseek-chat"}, env={"SHOU_CONFIG_DIR": str(tmp_path)}
    )
    with pytest.raises(ConfigError, match="DEEPSEEK_API_KEY"):
        resolve_model(s)


def test_secrets_are_masked(tmp_path: Path) -> None:
    s = load_settings(
        {"workspace": tmp_path}, env={"SHOU_CONFIG_DIR": str(tmp_path), "SHOU_API_KEY": "sk-verysecret-9876"}
    )
    shown = dict((k, v) for k, v, _ in describe(s))
    assert shown["api_key"] == "sk-…9876"
    assert "verysecret" not in repr(s)
    assert mask(None) == "(not set)" and mask("short") == "****"


def test_no_model_and_no_offline_model_says_how_to_install_it(tmp_path, monkeypatch) -> None:
    import pytest

    import shou.models.local as local
    from shou.errors import ConfigError
    from shou.models import get_model

    monkeypatch.setattr(local, "local_available", lambda: (False, "llama-cpp-python is not installed"))
    env = {"SHOU_CONFIG_DIR": str(tmp_path / "cfg"), "HOME": str(tmp_path)}
    settings = load_settings({"workspace": tmp_path}, env=env)
    with pytest.raises(ConfigError, match=r"pip install 'shou\[local\]'") as caught:
        get_model(settings=settings)
    assert "No model is configured" in str(caught.value)
