"""Secrets never reach an error message or an MLflow tag."""

from __future__ import annotations

import pytest

from advrag.common.redact import environment_secrets, redact

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
]


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
