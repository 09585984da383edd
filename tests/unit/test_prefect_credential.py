"""The project's Prefect credential (``scheduling.project_credential``): made once, 0600, whole
or not at all; a file others can read, or an empty one, is refused with the fix."""

from __future__ import annotations

import base64

import pytest

from advrag.ops import scheduling


def test_the_credential_is_made_once_private_and_reused(tmp_path):
    home = tmp_path / "prefect"
    first = scheduling.project_credential(home)
    path = home / scheduling.CREDENTIAL_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    assert len(first) == 43  # 32 random bytes, URL-safe base64 without padding
    assert scheduling.project_credential(home) == first
    assert sorted(p.name for p in home.iterdir()) == [scheduling.CREDENTIAL_FILE]  # no aside file
    assert scheduling.credential_env(home) == {"PREFECT_SERVER_API_AUTH_STRING": first,
                                               "PREFECT_API_AUTH_STRING": first}
    assert scheduling.project_credential(tmp_path / "other") != first


def test_a_credential_others_can_read_or_an_empty_one_is_refused(tmp_path):
    path = tmp_path / scheduling.CREDENTIAL_FILE
    path.write_text("kept\n")
    path.chmod(0o644)
    with pytest.raises(scheduling.SchedulingError, match=r"mode 644\): `chmod 600 "):
        scheduling.project_credential(tmp_path)
    assert path.read_text() == "kept\n"  # left as it was
    path.chmod(0o600)
    assert scheduling.project_credential(tmp_path) == "kept"
    path.write_text("\n")
    with pytest.raises(scheduling.SchedulingError, match="is empty: delete it"):
        scheduling.project_credential(tmp_path)


def test_the_header_is_prefects_basic_scheme():
    """Prefect's server decodes the whole Basic value as the credential (no user name)."""
    [value] = scheduling.basic_auth("s3cret").values()
    assert value == "Basic czNjcmV0" and base64.b64decode(value.split()[1]) == b"s3cret"
