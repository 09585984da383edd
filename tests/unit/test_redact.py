"""Secrets never reach an error message or an MLflow tag."""

from __future__ import annotations

import pytest

from advrag.common.redact import environment_secrets, redact, redact_param

CASES = [
    ("`dvc remote modify origin secret_access_key wJalrXUtnFEMI/K7MDENG` failed",
     "`dvc remote modify origin secret_access_key ***` failed"),
    ("dvc remote modify origin access_key_id AKIAIOSFODNN7EXAMPLE",
     "dvc remote modify origin access_key_id ***"),
    ("postgresql://mlflow:hunter2pass@db.internal:5432/mlflow?sslmode=verify-full",
     "postgresql://mlflow:***@db.internal:5432/mlflow?sslmode=verify-full"),
    ("HTTP 401: Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc",
     "HTTP 401: Authorization: ***"),
    ("request with bearer sk-proj-abcdefgh12345678 refused", "request with *** refused"),
    ("key sk-proj-abcdefgh12345678 leaked", "key *** leaked"),
    ("PASSWORD='s3cret word' and api_key=\"abc123\"", "PASSWORD=*** and api_key=***"),
    ("the step took 12 s; no secret here", "the step took 12 s; no secret here"),
    ('{"user": "mlflow", "password": "hunter2pass"}', '{"user": "mlflow", "password": ***}'),
    ("Authorization: Basic bWxmbG93Omh1bnRlcjI=", "Authorization: ***"),
    ("mlflow server --backend-store-uri x --password hunter2pass --port 5000",
     "mlflow server --backend-store-uri x --password *** --port 5000"),
    ("HF_HOME=/x hf_abcdefghijklmnopqrstuvwxyz12 pulled", "HF_HOME=/x *** pulled"),
    ("remote: ghp_abcdefghijklmnopqrstuvwxyz0123456789", "remote: ***"),
    ("key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAKC\n-----END RSA PRIVATE KEY-----\nok",
     "key:\n***\nok"),
    ("max_new_tokens: 128, the author wrote it", "max_new_tokens: 128, the author wrote it"),
]


@pytest.mark.parametrize(("name", "value", "kept"), [
    ("judge.api_key", "sk-live-abc", "***"), ("config.summary.token", "t0k3n-value", "***"),
    ("db.password", "hunter2", "***"), ("config.max_new_tokens", "128", "128"),
    ("config.evidence_tokens", "768", "768"), ("config.judge.api_key", "", ""),
    ("config.endpoint", "https://u:hunter2pass@host/v1", "https://u:***@host/v1")])
def test_params_keep_no_secret(name, value, kept):
    assert redact_param(name, value) == kept


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_secret_shapes_are_masked(text, expected):
    assert redact(text, secrets=[]) == expected


def test_secret_environment_values_are_masked_wherever_they_appear(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "correct-horse-battery")
    monkeypatch.setenv("SOME_PATH", "/usr/local/share/data")
    assert "correct-horse-battery" in environment_secrets()
    assert "/usr/local/share/data" not in environment_secrets()
    assert redact("login failed for correct-horse-battery at /usr/local/share/data") == \
        "login failed for *** at /usr/local/share/data"


def test_a_failed_dvc_command_names_no_secret(tmp_path):
    from advrag.ops import dataplane

    with pytest.raises(dataplane.DvcError) as error:  # not a DVC repository: dvc fails
        dataplane.run_dvc(["remote", "modify", "origin", "secret_access_key",
                           "wJalrXUtnFEMI/K7MDENG"], tmp_path)
    assert "wJalrXUtnFEMI" not in str(error.value) and "secret_access_key ***" in str(error.value)


def test_a_failed_runs_error_tag_names_no_secret(tmp_path, monkeypatch):
    import mlflow

    from advrag.tasks import tracking

    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / ".mlflow"))
    tracking.configure()
    with pytest.raises(RuntimeError):
        with tracking.tracked_run("redaction", "failing") as run_id:
            raise RuntimeError("cannot reach postgresql://mlflow:hunter2pass@db:5432/mlflow")
    tag = mlflow.get_run(run_id).data.tags["error"]
    assert "hunter2pass" not in tag and "mlflow:***@db" in tag
    config = {"judge": {"api_key": "sk-live-abcdefgh1234", "endpoint":
                        "https://u:hunter2pass@judge.internal/v1"}, "max_new_tokens": 128}
    with tracking.tracked_run("redaction", "params", params={"config": config}) as run_id:
        pass
    params = mlflow.get_run(run_id).data.params
    assert params == {"config.judge.api_key": "***", "config.max_new_tokens": "128",
                      "config.judge.endpoint": "https://u:***@judge.internal/v1"}
