"""verl's checkpoints mirrored to the bucket while its trainer runs, and pulled back before it
starts, so a verl run survives losing its spot worker as the local engine's runs do.

verl's trainer saves ``<default_local_dir>/global_step_<N>/`` and then names ``N`` in
``latest_checkpointed_iteration.txt``: a step is complete once that file names it or a later
one. With ``ADVRAG_ARTIFACT_BUCKET`` set, ``mirrored`` watches the directory while the trainer
runs and pushes each complete step to ``s3://<bucket>/checkpoints/<root>/global_step_<N>/``
through the local engine's ``CheckpointStore`` (its ``COMPLETE`` marker last; a step still
being written is never pushed), once more when the trainer exits; ``pull_latest`` brings the
bucket's complete steps onto a fresh disk and names the newest in verl's file, which verl's
default ``trainer.resume_mode=auto`` resumes from.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from advrag.engines.local.checkpoint_store import CheckpointStore, StepLayout
from advrag.engines.verl.checkpoints import LATEST, completed_step

VERL_STEPS = StepLayout("global_step_", 0)
"""verl's ``global_step_<N>`` step directories."""
EVERY_S = 10.0
"""How often ``mirrored`` looks for newly completed steps (a save takes far longer)."""


def pull_latest(store: CheckpointStore, root: Path) -> int | None:
    """The bucket's complete steps ``root`` lacks, downloaded, and the newest step there named
    in verl's ``LATEST`` file (so verl resumes from it); that step, or None when there is none."""
    store.pull(root)
    steps = VERL_STEPS.steps(root)
    if not steps:
        return None
    newest, named = max(steps), completed_step(root)
    if named is None or named < newest:
        (Path(root) / LATEST).write_text(str(newest))
    return max(newest, named or 0)


def push_completed(store: CheckpointStore, root: Path, pushed: set[int]) -> list[int]:
    """Push each complete step under ``root`` not in ``pushed`` (which grows); those pushed."""
    latest = completed_step(root)
    if latest is None:
        return []
    new = [step for step in VERL_STEPS.steps(root) if step <= latest and step not in pushed]
    for step in new:
        store.push(Path(root) / VERL_STEPS.name(step))
        pushed.add(step)
    return new


@contextmanager
def mirrored(store: CheckpointStore | None, root: Path) -> Iterator[None]:
    """While the block runs (verl's trainer), push each step verl completes under ``root``
    every ``EVERY_S`` seconds, and once more when it ends; nothing without a ``store``. A push
    that fails is printed and retried at the next look; the last one's failure is raised."""
    if store is None:
        yield
        return
    root, stop, every_s = Path(root), threading.Event(), EVERY_S
    pushed = store.complete_steps(root)

    def watch() -> None:
        while not stop.wait(every_s):
            try:
                for step in push_completed(store, root, pushed):
                    print(f"verl's step {step} → the bucket ({store.bucket})")
            except Exception as error:  # noqa: BLE001 (retried at the next look)
                print(f"warning: pushing verl's checkpoints under {root} failed ({error}); "
                      f"retrying in {every_s:.0f} s")

    watcher = threading.Thread(target=watch, name="verl-checkpoint-mirror", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
        for step in push_completed(store, root, pushed):
            print(f"verl's step {step} → the bucket ({store.bucket})")
