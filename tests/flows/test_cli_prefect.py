"""`advrag` commands run by hand, outside `make`: they set Prefect's start-up limit themselves,
and a temporary Prefect server that does not start is one line naming the fix, not a traceback.
(Reusing a running server: tests/flows/test_schedule.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
SHOW_LIMIT = ("import os\nfrom advrag.cli import _environment\n_environment()\n"
              f"print(os.environ['{LIMIT}'])")


def bare_env(**extra: str) -> dict[str, str]:
    """This environment without what the Makefile exports for Prefect: what a user's shell has."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PREFECT_") and k != "MLFLOW_TRACKING_URI"}
    return env | extra


def test_a_command_raises_prefects_start_up_limit_unless_the_user_set_one(tmp_path):
    def shown(env):
        return subprocess.run([sys.executable, "-c", SHOW_LIMIT], cwd=tmp_path, env=env,
                              capture_output=True, text=True, check=True).stdout.strip()

    assert shown(bare_env()) == "120"  # Prefect's own default, 20 s, failed on a busy machine
    assert shown(bare_env(**{LIMIT: "45"})) == "45"


def test_a_prefect_server_that_does_not_start_is_one_line_naming_the_fix(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "advrag.cli", "benchmark", "--config",
         str(ROOT / "configs/demo.yaml")], cwd=tmp_path, env=bare_env(**{LIMIT: "1"}),
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    [line] = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith("error: Prefect's temporary server did not answer within 1 s")
    assert f"{LIMIT}=600" in line and "`advrag ui`" in line
    assert not (tmp_path / ".mlflow").exists()  # nothing ran, nothing was written


GUARDED_EPHEMERAL = """
import json, os, httpx
from advrag.cli import _environment
from advrag.ops.scheduling import basic_auth
_environment()
from prefect import flow
from prefect.server.api.server import SubprocessASGIServer

server = SubprocessASGIServer()
server.start()
preflight = httpx.options(f"{server.api_url}/flows/", timeout=30, headers={
    "Origin": "http://evil.example", "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "content-type"})
forged = httpx.post(f"{server.api_url}/flows/", json={"name": "from-evil"}, timeout=30,
                    headers={"Origin": "http://evil.example"})
unsigned = httpx.get(f"{server.api_url}/csrf-token", params={"client": "evil"}, timeout=30)
signed = httpx.get(f"{server.api_url}/csrf-token", params={"client": "evil"}, timeout=30,
                   headers=basic_auth(os.environ["PREFECT_API_AUTH_STRING"]))

@flow
def answer() -> int:
    return 42

print(json.dumps({"allow_origin": preflight.headers.get("access-control-allow-origin"),
                  "forged": [forged.status_code, forged.json().get("detail")],
                  "token": [unsigned.status_code, unsigned.json().get("exception_message"),
                            signed.status_code],
                  "flow": answer(), "same_server": SubprocessASGIServer() is server}))
server.stop()
"""


def test_the_temporary_prefect_server_of_a_command_refuses_every_web_page(tmp_path):
    """Prefect's temporary server (a command run without `advrag ui`) answered CORS `*` and
    took state changes without a CSRF token or credential; a command now starts it refusing
    all three (the project's credential, made on first use), and the flows of the command
    still run through it."""
    import json

    result = subprocess.run([sys.executable, "-c", GUARDED_EPHEMERAL], cwd=tmp_path,
                            env=bare_env(PREFECT_HOME=str(tmp_path / "prefect")),
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["allow_origin"] is None
    assert seen["forged"] == [403, "Missing CSRF token."]
    assert seen["token"] == [401, "Unauthorized", 200]  # a CSRF token needs the credential
    assert (tmp_path / "prefect/auth-string").stat().st_mode & 0o777 == 0o600
    assert seen["flow"] == 42 and seen["same_server"] is True
