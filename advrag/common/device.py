"""Where models run: the first CUDA GPU torch sees, else the CPU; ``ADVRAG_DEVICE`` overrides.

Every model the project loads (policies, discriminator, summariser, embedder)
asks ``pick_device("auto")``, so a machine with a GPU trains and evaluates on it
without a config change, and ``ADVRAG_DEVICE=cpu`` keeps everything on the CPU.
"""

from __future__ import annotations

import os

DEVICE_ENV = "ADVRAG_DEVICE"
DEVICE_TYPES = ("cpu", "cuda")


def pick_device(requested: str = "auto") -> str:
    """Resolve ``requested`` to a device torch can use: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.

    ``"auto"`` takes ``$ADVRAG_DEVICE`` when it is set, else ``"cuda"`` when torch
    sees a GPU, else ``"cpu"``. A name torch does not know, or a GPU that is not
    there, raises ``ValueError`` saying what to pass instead.
    """
    import torch

    if requested == "auto":
        requested = os.environ.get(DEVICE_ENV, "").strip() or "auto"
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    source = f"device {requested!r}" + (f" (from ${DEVICE_ENV})" if os.environ.get(DEVICE_ENV) else "")
    try:
        device = torch.device(requested)
    except RuntimeError as err:
        raise ValueError(f"unknown {source}: use 'auto', 'cpu', 'cuda' or 'cuda:N'.") from err
    if device.type not in DEVICE_TYPES:
        raise ValueError(f"unsupported {source}: this project runs on 'cpu' or 'cuda' only.")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{source} asked for, but torch sees no CUDA GPU here: "
                         f"use 'cpu' or 'auto', or unset ${DEVICE_ENV}.")
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"{source}: only {torch.cuda.device_count()} GPU(s) here "
                         f"(cuda:0 to cuda:{torch.cuda.device_count() - 1}).")
    return requested
