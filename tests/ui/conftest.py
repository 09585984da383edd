"""The UIs as a person sees them: `advrag ui` (what `make ui` runs), headless Chromium.

`advrag ui` runs as a subprocess in a tmp project dir, on free ports of
127.0.0.1, and starts the real MLflow and Prefect servers. Chromium is Debian's `chromium`, installed here when it is
missing; the tests skip, with apt's error, only if that fails. Each page is
rendered once per try with `--dump-dom` and `--screenshot` in the same run (the
DOM we assert on is the picture we save), in UTC and US English so dates read
the same everywhere. Screenshots go to ``$ADVRAG_TEST_ARTIFACTS/ui`` (default
``test-artifacts/ui`` in the repo root, git-ignored).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest
from system_packages import apt_install

from advrag.ops import ui

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                  "--hide-scrollbars", "--lang=en-US", "--virtual-time-budget=15000"]
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
             "track", "wbr"}
HIDDEN_TAGS = {"script", "style", "noscript", "title"}
CELL_ROLES = {"cell", "gridcell", "columnheader"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def squash(text: str) -> str:
    return " ".join(text.split())


class _Dom(HTMLParser):
    """Visible text, ARIA table rows (cell texts) and AG Grid cells by (row-id, col-id)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[dict] = []
        self.text: list[str] = []
        self.rows: list[list[str]] = []
        self.cells: dict[tuple[str, str], str] = {}
        self.headers: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        if tag not in VOID_TAGS:
            a = dict(attrs)
            self.stack.append({"tag": tag, "role": a.get("role"), "row": a.get("row-id"),
                               "col": a.get("col-id"), "text": [], "cells": []})

    def handle_endtag(self, tag):
        while self.stack:
            frame = self.stack.pop()
            self._close(frame)
            if frame["tag"] == tag:
                return

    def handle_data(self, data):
        if any(f["tag"] in HIDDEN_TAGS for f in self.stack):
            return
        self.text.append(data)
        for frame in self.stack:
            if frame["role"] in CELL_ROLES:
                frame["text"].append(data)

    def _close(self, frame: dict) -> None:
        if frame["role"] == "row":
            self.rows.append(frame["cells"])
        if frame["role"] not in CELL_ROLES:
            return
        text = squash(" ".join(frame["text"]))
        row = next((f for f in reversed(self.stack) if f["role"] == "row"), None)
        if row is not None:
            row["cells"].append(text)
        if frame["role"] == "columnheader" and frame["col"]:
            self.headers[frame["col"]] = text
        if frame["role"] == "gridcell" and frame["col"] and row is not None and row["row"]:
            self.cells[(row["row"], frame["col"])] = text


@dataclass
class Page:
    """One rendering of a URL: its DOM after the scripts ran, and the screenshot of it."""

    url: str
    html: str
    screenshot: Path
    dom: _Dom = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.dom = _Dom()
        self.dom.feed(self.html)
        self.dom.close()

    @property
    def text(self) -> str:
        """The page's text, whitespace collapsed."""
        return squash(" ".join(self.dom.text))

    def row_with(self, needle: str) -> list[str]:
        """Cell texts of the first table row with a cell equal to ``needle`` ([] if none)."""
        return next((row for row in self.dom.rows if needle in row), [])


@dataclass
class Browser:
    """Headless Chromium, a fresh profile per rendering."""

    binary: str
    profile_root: Path

    def render(self, url: str, screenshot: Path, window: tuple[int, int],
               flags: tuple[str, ...] = ()) -> Page:
        profile = tempfile.mkdtemp(dir=self.profile_root)
        cmd = [self.binary, *CHROMIUM_FLAGS, *flags, f"--user-data-dir={profile}",
               f"--window-size={window[0]},{window[1]}", f"--screenshot={screenshot}",
               "--dump-dom", url]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                              env={**os.environ, "TZ": "UTC"}, cwd=self.profile_root)
        shutil.rmtree(profile, ignore_errors=True)
        if proc.returncode != 0:
            raise RuntimeError(f"chromium exited {proc.returncode} on {url}: {proc.stderr[-2000:]}")
        return Page(url, proc.stdout, screenshot)

    def wait_for(self, url: str, shows: Callable[[Page], bool], screenshot: Path,
                 window: tuple[int, int] = (1600, 1000), timeout_s: float = 180) -> Page:
        """Render until ``shows(page)`` (the SPA has fetched its data); the last page either way."""
        deadline = time.monotonic() + timeout_s
        while True:
            page = self.render(url, screenshot, window)
            if shows(page) or time.monotonic() > deadline:
                return page
            time.sleep(2)

    def signed_in(self, url: str, password: str, shows: Callable[[Page], bool],
                  screenshot: Path, window: tuple[int, int] = (1600, 1000),
                  timeout_s: float = 180) -> Page:
        """Log in as a person does at the page the server's root shows (type ``password``
        into the password field, press Enter), then open ``url`` and read its DOM until
        ``shows(page)`` (loading it again every ``RELOAD_S``); the last page either way, its
        screenshot saved."""
        import base64
        from urllib.parse import urljoin

        profile = Path(tempfile.mkdtemp(dir=self.profile_root))
        tools = DevTools(self.binary, profile, window)
        try:
            tools.call("Page.navigate", url=urljoin(url, "/"))
            field = "document.querySelector('input[type=password]')"
            if not _until(lambda: tools.evaluate(f"!!{field}"), timeout_s):
                raise RuntimeError(f"{url} showed no password field: {tools.evaluate('document.body.innerText')}")
            tools.evaluate(f"{field}.focus()")
            tools.call("Input.insertText", text=password)
            tools.press_enter()
            if not _until(lambda: not tools.evaluate(f"!!{field}"), timeout_s):
                raise RuntimeError(f"the login at {url} did not pass: {tools.evaluate('document.body.innerText')}")
            page: list[Page] = []

            def shown() -> bool:
                html = tools.evaluate("document.documentElement.outerHTML")
                page[:] = [Page(url, html or "", screenshot)]
                return shows(page[0])

            deadline = time.monotonic() + timeout_s
            while True:  # reload now and then: a section the SPA fetched once is not refetched
                tools.call("Page.navigate", url=url)
                if _until(shown, RELOAD_S) or time.monotonic() > deadline:
                    break
            screenshot.write_bytes(base64.b64decode(tools.call("Page.captureScreenshot")["data"]))
            return page[0]
        finally:
            tools.close()
            shutil.rmtree(profile, ignore_errors=True)


RELOAD_S = 15
"""How long ``Browser.signed_in`` reads one load of a page before it loads it again."""


class DevTools:
    """One headless Chromium page driven over the DevTools protocol, for what ``--dump-dom``
    cannot do: type into a page (Prefect's login) and read the DOM it then shows."""

    def __init__(self, binary: str, profile: Path, window: tuple[int, int]) -> None:
        from websockets.sync.client import connect

        flags = [f for f in CHROMIUM_FLAGS if not f.startswith("--virtual-time-budget")]
        self.process = subprocess.Popen(
            [binary, *flags, f"--user-data-dir={profile}", f"--window-size={window[0]},{window[1]}",
             "--remote-debugging-port=0", "about:blank"], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env={**os.environ, "TZ": "UTC"})
        active, deadline = profile / "DevToolsActivePort", time.monotonic() + 60
        while not (active.is_file() and active.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.2)
        port = active.read_text().split()[0]
        import httpx

        [page] = [t for t in httpx.get(f"http://127.0.0.1:{port}/json", timeout=30).json()
                  if t["type"] == "page"]
        self.socket, self.calls = connect(page["webSocketDebuggerUrl"], max_size=None), 0

    def call(self, method: str, **params) -> dict:
        """Send one command; its result (events arriving meanwhile are skipped)."""
        import json

        self.calls += 1
        self.socket.send(json.dumps({"id": self.calls, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=60))
            if message.get("id") == self.calls:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (RuntimeError if it threw, as
        while the page is between documents)."""
        answer = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{expression}: {answer['exceptionDetails'].get('text')}")
        return answer["result"].get("value")

    def press_enter(self) -> None:
        """Enter, as a keyboard sends it (submits the focused form)."""
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter",
                      windowsVirtualKeyCode=13, **({"text": "\r"} if kind == "keyDown" else {}))

    def close(self) -> None:
        self.socket.close()
        self.process.terminate()
        self.process.wait(timeout=30)


def _until(check: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``check`` every half second until it holds or ``timeout_s`` passed (a check that
    fails because the page is between documents counts as not yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if check():
                return True
        except RuntimeError:  # the page was navigating: its old document is gone
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


@pytest.fixture(scope="session")
def browser(tmp_path_factory) -> Browser:
    chromium = shutil.which("chromium") or apt_install("chromium", lambda: shutil.which("chromium"))
    return Browser(chromium, tmp_path_factory.mktemp("chromium"))


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Where the screenshots go (kept after the run, for people and CI to look at)."""
    out = Path(os.environ.get("ADVRAG_TEST_ARTIFACTS") or ROOT / "test-artifacts") / "ui"
    out.mkdir(parents=True, exist_ok=True)
    return out


@dataclass
class MakeUI:
    """A running `advrag ui`: its project dir, the URLs it serves and what it printed."""

    process: subprocess.Popen
    project: Path
    mlflow_url: str
    prefect_url: str
    output: list[str]

    @property
    def prefect_env(self) -> dict[str, str]:
        """Environment of a Prefect client or CLI talking to this server."""
        from advrag.ops.scheduling import credential_env

        home = self.project / ".prefect"
        return {**os.environ, "PREFECT_HOME": str(home),
                "PREFECT_API_URL": f"{self.prefect_url}/api", **credential_env(home)}

    def wait_for_line(self, needle: str, timeout_s: float) -> None:
        """Block until a printed line contains ``needle``; fail with the output if it exits first."""
        deadline = time.monotonic() + timeout_s
        while not any(needle in line for line in self.output):
            if self.process.poll() is not None or time.monotonic() > deadline:
                time.sleep(0.5)  # let the reader thread drain the pipe
                pytest.fail(f"`advrag ui` printed no {needle!r} (exit {self.process.poll()}):\n"
                            + "".join(self.output[-40:]))
            time.sleep(0.2)


def _collect(process: subprocess.Popen, lines: list[str]) -> None:
    """Append the process's output lines as they come (a reader thread)."""
    for line in process.stdout:
        lines.append(line)


@pytest.fixture(scope="module")
def make_ui(tmp_path_factory):
    """`advrag ui` (what `make ui` runs) in a fresh project dir, on free ports: `.mlflow/` and
    PREFECT_HOME=`.prefect/` start empty, as before a first `make demo`. Interrupted (Ctrl-C's
    SIGINT) at the end unless a test already did."""
    project = tmp_path_factory.mktemp("make-ui")
    mlflow_port, prefect_port = free_port(), free_port()
    env = {**os.environ, "PREFECT_HOME": str(project / ".prefect")}
    for key in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI"):
        env.pop(key, None)
    cmd = [sys.executable, "-m", "advrag.cli", "ui", "--mlflow-port", str(mlflow_port),
           "--prefect-port", str(prefect_port), "--config", str(ROOT / "configs/demo.yaml")]
    process = subprocess.Popen(cmd, cwd=project, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    started = MakeUI(process, project, f"http://127.0.0.1:{mlflow_port}",
                     f"http://127.0.0.1:{prefect_port}", [])
    threading.Thread(target=_collect, args=(process, started.output), daemon=True).start()
    try:
        started.wait_for_line("Ctrl-C stops both.", timeout_s=300)
        yield started
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture(scope="module")
def nightly_deployment(make_ui) -> dict:
    """prefect.yaml's `nightly` deployment, registered the way `advrag schedule` does it (the
    work pool, then `prefect deploy -n nightly` from the repo root) but with no worker: the
    scheduler queues the cron's runs and nothing executes them."""
    import httpx
    import yaml

    from advrag.ops import scheduling

    spec = next(d for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
                if d["name"] == "nightly")
    env = make_ui.prefect_env
    scheduling.ensure_pool(spec["work_pool"]["name"], env, ROOT)
    scheduling.run_cli(["--no-prompt", "deploy", "-n", "nightly", "--pool", spec["work_pool"]["name"]],
                       env, ROOT)
    auth = scheduling.basic_auth(env["PREFECT_API_AUTH_STRING"])
    found = httpx.get(f"{env['PREFECT_API_URL']}/deployments/name/nightly/nightly", timeout=30,
                      headers=auth)
    found.raise_for_status()
    deployment = found.json()
    headers = scheduling.api_headers(env["PREFECT_API_URL"], env["PREFECT_API_AUTH_STRING"], "advrag-tests")
    queued = scheduled_runs(env["PREFECT_API_URL"], deployment["id"], headers, timeout_s=180)
    return {**deployment, "spec": spec, "queued": queued}


def scheduled_runs(api: str, deployment_id: str, headers: dict, timeout_s: float) -> list[dict]:
    """The deployment's runs in state Scheduled, once the server's scheduler has queued any
    (its loops run every few seconds to a minute; a loaded machine stretches them)."""
    import httpx

    body = {"deployments": {"id": {"any_": [deployment_id]}},
            "flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}}}
    deadline = time.monotonic() + timeout_s
    while True:
        response = httpx.post(f"{api}/flow_runs/filter", json=body, headers=headers, timeout=30)
        response.raise_for_status()
        if response.json() or time.monotonic() > deadline:
            return response.json()
        time.sleep(2)


@pytest.fixture(scope="module")
def benchmark_store(make_ui, tiny_policy_dir, small_world_dir, small_index_dir) -> dict:
    """What the demo writes to the served store, from the real flows: the benchmark flow (demo
    config, tiny policy, run on the served Prefect) and the policy registered as
    `advrag-reasoner` v1 with the `champion` alias; then the EM/F1 view `advrag ui` links to
    (it writes that view when it starts on an existing store; this one started empty)."""
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    from advrag.config import DemoConfig, PipelineConfig, load_config
    from advrag.flows.benchmark import benchmark
    from advrag.flows.rl import benchmark_tags
    from advrag.recipes import recipe_for
    from advrag.tasks import tracking

    work = make_ui.project
    config = load_config(ROOT / "configs/demo.yaml", DemoConfig).benchmark.model_copy(update=dict(
        model=str(tiny_policy_dir), dtype="float32", world_dir=small_world_dir,
        index_dir=small_index_dir, limit=4, batch_size=4, max_turns=1, max_new_tokens=8))
    nightly = load_config(ROOT / "configs/nightly.yaml", PipelineConfig)
    name = recipe_for(ROOT / nightly.recipe).registry_names()["reasoner"]  # the served reasoner
    with pytest.MonkeyPatch.context() as patch, \
            temporary_settings({PREFECT_API_URL: make_ui.prefect_env["PREFECT_API_URL"],
                                PREFECT_API_AUTH_STRING: make_ui.prefect_env["PREFECT_API_AUTH_STRING"]}):
        patch.chdir(work)  # the data version is read from the cwd's DVC files: none here
        patch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(work / tracking.DEFAULT_DIR))
        result = benchmark(config, run_name="tiny-policy")
        version = tracking.register_model_dir(result["run_id"], tiny_policy_dir, name,
                                              tags=benchmark_tags(result))
        tracking.set_alias(name, "champion", version)
        route = tracking.share_runs_view(config.experiment, *ui.EM_F1_VIEW)
        metrics = tracking.client().get_run(result["run_id"]).data.metrics
    return {"config": config, "run_id": result["run_id"], "metrics": metrics,
            "model": name, "version": version, "route": route}
