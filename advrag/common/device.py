"""Where models run: the first CUDA GPU torch sees, else the CPU; ``ADVRAG_DEVICE`` overrides.

Every model the project loads (policies, discriminator, summariser, embedder)
asks ``pick_device("auto")``, so a machine with a GPU trains and evaluates on it
without a config change, and ``ADVRAG_DEVICE=cpu`` keeps everything on the CPU.
"""

from __future__ import annotations

import os
import re

DEVICE_ENV = "ADVRAG_DEVICE"
DEVICE_NAME = re.compile(r"auto|cpu|cuda(:\d+)?")


def requested_device(requested: str = "auto") -> tuple[str, str]:
    """``requested`` with ``"auto"`` replaced by ``$ADVRAG_DEVICE`` where set, and how to name it
    in an error; raises ``ValueError`` for a name that is not auto, cpu, cuda or cuda:N.

    Needs no torch, so the CLI checks the variable before it imports anything heavy.
    """
    where = ""
    if requested == "auto" and os.environ.get(DEVICE_ENV, "").strip():
        requested, where = os.environ[DEVICE_ENV].strip(), f" (from ${DEVICE_ENV})"
    source = f"device {requested!r}{where}"
    if not DEVICE_NAME.fullmatch(requested):
        raise ValueError(f"unknown {source}: use 'auto', 'cpu', 'cuda' or 'cuda:N' "
                         "(this project runs on CPUs and CUDA GPUs).")
    return requested, source


def pick_device(requested: str = "auto") -> str:
    """Resolve ``requested`` to ``"cpu"``, ``"cuda"`` or ``"cuda:N"``: ``"auto"`` takes
    ``$ADVRAG_DEVICE`` when it is set, else ``"cuda"`` when torch sees a GPU, else ``"cpu"``.

    A bad name, or a GPU that is not there, raises ``ValueError`` saying what to pass.
    """
    import torch

    requested, source = requested_device(requested)
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"{source} asked for, but torch sees no CUDA GPU here: "
                         f"use 'cpu' or 'auto', or unset ${DEVICE_ENV}.")
    index = int(requested.partition(":")[2] or 0)
    if requested.startswith("cuda") and index >= torch.cuda.device_count():
        raise ValueError(f"{source}: only {torch.cuda.device_count()} GPU(s) here "
                         f"(cuda:0 to cuda:{torch.cuda.device_count() - 1}).")
    return requested
