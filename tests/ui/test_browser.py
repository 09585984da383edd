"""`make ui` and what a person sees in its two UIs, read from headless Chromium.

`advrag ui` runs for the whole module in a fresh project dir; the demo's
benchmark and the nightly deployment are written into the stores it serves.
MLflow: the demo experiment's benchmark run with one EM and one F1 column per
method, each cell showing the value the run logged; the registered model with
`champion` on its version. Prefect, after logging in with the project's password
as a person does: the nightly deployment with its cron in words and the next run
the scheduler queued, at 02:00 Europe/Berlin worked out by hand (the browser runs
in UTC). A page from a rebinding name gets nothing from either server. Last,
Ctrl-C stops both servers.
"""

from __future__ import annotations

import re
import signal
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from advrag.ops import ui


@pytest.mark.slow
def test_mlflow_runs_table_shows_em_and_f1_per_method(make_ui, benchmark_store, browser, artifacts_dir):
    store, run_id = benchmark_store, benchmark_store["run_id"]
    assert store["route"] is not None, "share_runs_view found no benchmark experiment"
    keys = [f"avg/{method}/{metric}" for method in sorted(store["config"].methods)
            for metric in ("em", "f1")]
    columns = [f"metrics.`{key}`" for key in keys]

    page = browser.wait_for(f"{make_ui.mlflow_url}/{store['route']}",
                            lambda p: all((run_id, c) in p.dom.cells for c in columns),
                            artifacts_dir / "mlflow-runs-em-f1.png", window=(2400, 1000))

    assert store["config"].experiment in page.text
    name_cell = page.dom.cells.get((run_id, "attributes.`Run Name`"), "")
    assert name_cell.endswith("tiny-policy"), page.text  # after the run's colour swatch
    assert [page.dom.headers.get(c) for c in columns] == keys
    for key, column in zip(keys, columns):
        shown = page.dom.cells.get((run_id, column))
        assert shown is not None, f"no {key} cell for the run; page text: {page.text[:1500]}"
        assert float(shown) == pytest.approx(store["metrics"][key], abs=1e-3), key


@pytest.mark.slow
def test_mlflow_registered_model_shows_the_champion(make_ui, benchmark_store, browser, artifacts_dir):
    name, version = benchmark_store["model"], benchmark_store["version"]
    label = f"Version {version}"

    page = browser.wait_for(f"{make_ui.mlflow_url}/#/models/{name}",
                            lambda p: "champion" in " ".join(p.row_with(label)),
                            artifacts_dir / "mlflow-model-champion.png")

    assert f"Registered Models {name}" in page.text
    row = page.row_with(label)
    assert row, f"no row for {label}; page text: {page.text[:1500]}"
    assert "@ champion" in " ".join(row)


def next_run(cron_hour: int, tz: str, now: datetime) -> datetime:
    """The first day's ``cron_hour``:00 in ``tz`` after ``now`` (a daily `0 H * * *` cron)."""
    local = now.astimezone(ZoneInfo(tz))
    candidate = datetime(local.year, local.month, local.day, cron_hour, tzinfo=ZoneInfo(tz))
    if candidate <= now:
        day = local.date() + timedelta(days=1)
        candidate = datetime(day.year, day.month, day.day, cron_hour, tzinfo=ZoneInfo(tz))
    return candidate


def test_next_run_is_worked_out_in_the_schedules_time_zone():
    # 23:30 UTC on 2026-03-28 is 00:30 CET on the 29th; 02:00 CET that day (the clocks jump
    # from 02:00 CET to 03:00 CEST) is 01:00 UTC.
    now = datetime(2026, 3, 28, 23, 30, tzinfo=timezone.utc)
    assert next_run(2, "Europe/Berlin", now).astimezone(timezone.utc) == \
        datetime(2026, 3, 29, 1, 0, tzinfo=timezone.utc)
    # 01:30 UTC in winter is 02:30 CET: tonight's run has passed, the next is 01:00 UTC tomorrow.
    now = datetime(2026, 11, 22, 1, 30, tzinfo=timezone.utc)
    assert next_run(2, "Europe/Berlin", now).astimezone(timezone.utc) == \
        datetime(2026, 11, 23, 1, 0, tzinfo=timezone.utc)


@pytest.mark.slow
def test_prefect_shows_the_nightly_deployment_and_its_schedule(make_ui, nightly_deployment, browser,
                                                               artifacts_dir):
    spec = nightly_deployment["spec"]
    assert spec["schedules"][0]["cron"] == "0 2 * * *", "the expected wording below is for 0 2 * * *"
    tz = spec["schedules"][0]["timezone"]
    due = next_run(2, tz, datetime.now(timezone.utc)).astimezone(timezone.utc)
    queued = sorted(datetime.fromisoformat(r["expected_start_time"]) for r in nightly_deployment["queued"])
    assert queued, "Prefect's scheduler queued no run of the nightly deployment within 180 s"
    assert queued[0] == due, f"the scheduler queued {queued[0]} first, the cron says {due}"
    scheduled_for = f"Scheduled for {due:%Y/%m/%d %I:%M:%S %p}"  # the browser's zone is UTC

    password = make_ui.prefect_env["PREFECT_API_AUTH_STRING"]  # what `advrag ui` says to type
    pool = spec["work_pool"]["name"]
    header = f"Deployments nightly Flow nightly Work Pool {pool}"
    page = browser.signed_in(f"{make_ui.prefect_url}/deployments/deployment/{nightly_deployment['id']}",
                             password, lambda p: scheduled_for in p.text and header in p.text,
                             artifacts_dir / "prefect-nightly-deployment.png")

    assert header in page.text, page.text[:1500]
    assert "Schedules At 02:00 AM every day" in page.text
    assert scheduled_for in page.text, f"no queued run at {due}; page text: {page.text[:1500]}"
    assert f"Entrypoint {spec['entrypoint']}" in page.text
    assert "Authentication failed" not in page.text and "went wrong" not in page.text


@pytest.mark.slow
def test_a_rebinding_page_gets_nothing_from_either_ui(make_ui, browser, artifacts_dir):
    """DNS rebinding as the browser meets it: Chromium resolves rebind.example to 127.0.0.1
    (its host-resolver rules stand in for the attacker's DNS), so a page from there is
    same-origin to the server; both servers refuse its Host (Prefect's answered it before)."""
    rebinding = ("--host-resolver-rules=MAP rebind.example 127.0.0.1",)
    refusals = {"mlflow": (make_ui.mlflow_url, "Invalid Host header"),
                "prefect": (make_ui.prefect_url, "'rebind.example' is not one this server answers")}
    for name, (url, refusal) in refusals.items():
        port = url.rsplit(":", 1)[1]
        page = browser.render(f"http://rebind.example:{port}/", artifacts_dir / f"{name}-rebinding.png",
                              (1200, 400), flags=rebinding)
        assert refusal in page.text, page.text[:500]
    own = browser.render(f"http://localhost:{make_ui.prefect_url.rsplit(':', 1)[1]}/",
                         artifacts_dir / "prefect-login.png", (1200, 800))
    assert "Login" in own.text  # its own names: the UI, asking for the project's password
    assert f"{make_ui.project}/.prefect/auth-string" in "".join(make_ui.output)


def listening_hosts(port: int) -> set[str]:
    """Addresses with a TCP socket listening on ``port``, from /proc/net/tcp{,6} (Linux)."""
    hosts = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                hosts.add("127.0.0.1" if address == "0100007F" else address)
    return hosts


@pytest.mark.slow
def test_make_ui_serves_on_loopback_and_ctrl_c_stops_both(make_ui):
    # Last in the module: it stops the servers the tests above looked at.
    printed = "".join(make_ui.output)
    health = {make_ui.mlflow_url: "/health", make_ui.prefect_url: "/api/health"}
    for name, url in (("MLflow", make_ui.mlflow_url), ("Prefect", make_ui.prefect_url)):
        assert re.search(rf"^{name} +{re.escape(url)}  \(ready in \d+\.\d s", printed, re.M), printed
        assert listening_hosts(int(url.rsplit(":", 1)[1])) == {"127.0.0.1"}
        assert ui.answers(url + health[url])

    make_ui.process.send_signal(signal.SIGINT)  # what Ctrl-C in the terminal sends

    assert make_ui.process.wait(timeout=90) == 0
    time.sleep(0.5)  # the reader thread takes the last lines
    assert "".join(make_ui.output).rstrip().endswith("stopped.")
    for url, path in health.items():
        assert not ui.answers(url + path)
        assert listening_hosts(int(url.rsplit(":", 1)[1])) == set()
