"""The allocator: tcmalloc preloaded by re-executing the command once, chosen by $ADVRAG_ALLOCATOR."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import mlflow
import pytest
from system_packages import apt_install

from advrag.common.allocator import (
    ALLOCATOR_ENV,
    allocator_in_use,
    find_tcmalloc,
    preload_environment,
)
from advrag.tasks import tracking

LIB = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tcmalloc() -> str:
    """The installed tcmalloc library (Debian's libtcmalloc-minimal4, installed when missing)."""
    return find_tcmalloc() or apt_install("libtcmalloc-minimal4", find_tcmalloc)


def test_auto_preloads_an_installed_tcmalloc_before_what_was_preloaded():
    environ = preload_environment({"LD_PRELOAD": "libmine.so", "HOME": "/h"}, LIB)
    assert environ == {"LD_PRELOAD": f"{LIB}:libmine.so", "HOME": "/h"}
    assert preload_environment({}, LIB) == {"LD_PRELOAD": LIB}
    assert preload_environment({ALLOCATOR_ENV: "tcmalloc"}, LIB)["LD_PRELOAD"] == LIB


def test_nothing_changes_when_preloaded_already_asked_not_to_or_not_installed():
    assert preload_environment({"LD_PRELOAD": LIB}, LIB) is None  # the re-executed process
    assert preload_environment({ALLOCATOR_ENV: "system"}, LIB) is None
    assert preload_environment({}, None) is None
    assert preload_environment({ALLOCATOR_ENV: "auto"}, None) is None


def test_a_required_but_missing_tcmalloc_or_an_unknown_choice_is_an_error():
    with pytest.raises(ValueError, match="apt-get install libtcmalloc-minimal4"):
        preload_environment({ALLOCATOR_ENV: "tcmalloc"}, None)
    with pytest.raises(ValueError, match=r"'jemalloc' is not one of auto, tcmalloc, system"):
        preload_environment({ALLOCATOR_ENV: "jemalloc"}, LIB)


def test_find_prefers_the_minimal_library_and_reports_none_elsewhere(tmp_path):
    for name in ("libtcmalloc.so.4", "libtcmalloc_minimal.so.4"):
        (tmp_path / name).write_bytes(b"")
    assert find_tcmalloc((str(tmp_path / "absent"), str(tmp_path))) == str(
        tmp_path / "libtcmalloc_minimal.so.4")
    assert find_tcmalloc((str(tmp_path / "absent"),)) is None


def test_allocator_in_use_reads_the_process_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f10 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4\n")
    assert allocator_in_use(maps) == "tcmalloc"
    maps.write_text("7f00-7f10 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert allocator_in_use(maps) == "system"
    assert allocator_in_use(tmp_path / "missing") == "system"


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """``python -c code`` from the project root, with ``env`` added to a preload-free environment."""
    base = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", ALLOCATOR_ENV)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          env={**base, **env}, capture_output=True, text=True, timeout=120)


def test_use_tcmalloc_reexecutes_the_same_process_once_with_it_loaded(tcmalloc):
    code = """
        import os
        from advrag.common.allocator import allocator_in_use, use_tcmalloc
        print("start", os.getpid(), allocator_in_use())
        use_tcmalloc()
        print("run", os.getpid(), allocator_in_use(), os.environ.get("LD_PRELOAD", "-"))
    """
    lines = run_python(code).stdout.splitlines()
    pid = lines[0].split()[1]
    # printed before the exec (flushed), again by the re-executed script, which runs on
    assert lines == [f"start {pid} system", f"start {pid} tcmalloc", f"run {pid} tcmalloc {tcmalloc}"]
    kept = run_python(code, **{ALLOCATOR_ENV: "system"}).stdout.splitlines()
    assert [line.split()[::2] for line in kept] == [["start", "system"], ["run", "system"]]


def test_the_cli_refuses_an_unknown_allocator_before_running_anything():
    proc = subprocess.run([sys.executable, "-m", "advrag.cli", "--help"], cwd=ROOT,
                          env={**os.environ, ALLOCATOR_ENV: "jemaloc"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "ADVRAG_ALLOCATOR='jemaloc' is not one of auto, tcmalloc, system" in proc.stderr
    assert "Usage" not in proc.stdout


def test_each_tracked_run_records_the_allocator_of_its_process(tcmalloc, tmp_path):
    uri = tracking.default_uri(tmp_path / "ml")
    code = f"""
        from advrag.tasks import tracking
        tracking.configure({uri!r})
        with tracking.tracked_run("exp", "r") as run_id:
            print(run_id)
    """
    for env, expected in (({"LD_PRELOAD": tcmalloc}, "tcmalloc"), ({}, "system")):
        proc = run_python(code, **env)
        assert proc.returncode == 0, proc.stderr
        mlflow.set_tracking_uri(uri)
        assert mlflow.get_run(proc.stdout.split()[-1]).data.tags["advrag.allocator"] == expected

