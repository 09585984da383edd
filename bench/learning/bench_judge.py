"""GAR's judge against the evidence: held-out AUROC on slices of held-out questions.

    python bench/learning/bench_judge.py --start PATH [--name NAME] [--questions N]
        [--heldout-fraction F] [--rollouts K] [--epochs E] [--archive DIR]

Runs the ``discriminator-sft`` flow (``configs/discriminator.yaml`` with these overrides) on the
world's training questions from ``--start`` (the chosen warm-up: the policy GAR trains and whose
rollouts, ``--rollouts K`` of each question, add slices of its own reasoning). The flow labels the
slices with the grounded judge, splits them by question, fine-tunes the judge with early stopping
on the AUROC of the dev slices (a third of the held-out questions') and measures the kept epoch on
the other held-out slices. Writes ``bench/results/judge-<name>.json``: the held-out measures over
all slices and per source (demonstration, corrupted, rollout), 95% intervals of the AUROC over
questions, the slice counts per split (train, dev, heldout) and source, each epoch's dev AUROC and
loss, and the passages the evidence cap left out. The protocol and its targets are in ``docs/gar-experiments.md``. Resumable: the labelled slice
set is built once (``.cache/advrag/judge/<name>/slices``) and each finished SFT epoch is kept until
the SFT ends, so a rerun of the same command goes on where a killed one stopped. Across sessions
(whose ``.cache/`` does not survive), ``--archive DIR`` keeps what to commit: the rollouts as they
are sampled, which a later session's run samples on after, and the slice set once it is built,
which a later session's run unpacks to go straight to the SFT. The report names the start the SFT
ran on, and the starts whose rollouts the set holds, by the digests of their weights.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from advrag.common.fileio import atomic_write_text, whole_lines
from advrag.config import load_config
from advrag.models.loading import resolve_model_dir
from advrag.recipes.gar import DiscriminatorSFTConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from arm_records import model_digest, read_text, write_text
from inputs import offline_world
from reporting import write_report

ROOT = Path(__file__).resolve().parents[2]
SLICES, ROLLOUTS = "slices.jsonl.gz", "rollouts.jsonl.gz"
"""What ``--archive`` holds: the finished slice set, and the rollouts sampled so far."""


def judge_config(args: argparse.Namespace) -> DiscriminatorSFTConfig:
    """``configs/discriminator.yaml`` with the run's overrides, in a checkpoint dir of its own."""
    config = load_config(ROOT / "configs/discriminator.yaml", DiscriminatorSFTConfig)
    return config.model_copy(update={
        "questions": args.questions, "heldout_fraction": args.heldout_fraction,
        "rollouts": args.rollouts, "sft": config.sft.model_copy(update={"epochs": args.epochs}),
        "checkpoint_dir": ROOT / ".cache/advrag/judge" / args.name,
        "out_dir": ROOT / ".cache/advrag/judge" / args.name / "slices",
        "experiment": "advrag-bench-judge"})


def slice_set(config: DiscriminatorSFTConfig, args: argparse.Namespace
              ) -> tuple[Path, list[dict]]:
    """The run's labelled slice set, and the starts whose rollouts it holds (``[{"start":
    digest, "rollouts": n}]``, in the order sampled).

    Built once (the ``gar-slices`` flow, from ``--start``) and reused by a rerun of the same
    arguments, so a killed run does not label again; refused when it was made with other ones.
    With ``--archive DIR``, what a session's ``.cache/`` would lose goes there, to be committed:
    the rollouts as they are sampled (``rollouts.jsonl.gz``, packed every few minutes; a later
    session samples on after them) and the finished set (``slices.jsonl.gz``, which a later
    session unpacks instead of building)."""
    made = made_with(config, args.start)
    path, marker = config.out_dir / "slices.jsonl", config.out_dir / "made-with.json"
    archive = args.archive
    if archive is not None and (archive / SLICES).is_file():
        return unpacked(archive / SLICES, made, path, marker)
    segments = built(config, args, made, path, marker)
    if archive is not None:
        header = {"made_with": made, "rollouts_from": segments}
        write_text(archive / SLICES, json.dumps(header) + "\n" + path.read_text())
        print(f"the slice set, to commit: {archive / SLICES} (rollouts of {segments})", flush=True)
    return path, segments


def made_with(config: DiscriminatorSFTConfig, start: str) -> dict:
    """The settings a slice set depends on (not the SFT's, which a later session may change):
    what its marker and committed header record, and what a rerun must match."""
    return {"start": start, **config.model_dump(mode="json", exclude={
        "sft", "patience", "dev_fraction", "checkpoint_dir", "out_dir", "slices", "experiment",
        "registered_model"})}


def built(config: DiscriminatorSFTConfig, args: argparse.Namespace, made: dict, path: Path,
          marker: Path) -> list[dict]:
    """The slice set at ``path`` built by the ``gar-slices`` flow (unless a killed run of the
    same settings, ``marker``, finished it), its rollouts packed into ``--archive`` as they are
    sampled; the starts whose rollouts it holds."""
    from advrag.flows.discriminator_sft import gar_slices
    from advrag.tasks.discriminator import rollout_cache

    cache, digest = rollout_cache(config, args.start), model_digest(resolve_model_dir(args.start))
    rollouts = args.archive / ROLLOUTS if args.archive is not None else None
    carried = carried_rollouts(rollouts, cache, made) if rollouts is not None else []
    if path.is_file() and marker.is_file():
        if json.loads(marker.read_text()) != made:
            raise SystemExit(f"{config.out_dir} holds slices made with {marker.read_text()}; "
                             "use another --name or delete it")
    else:
        with packed_rollouts(cache, rollouts, made, carried, digest):
            gar_slices(config, base=args.start)
        atomic_write_text(marker, [json.dumps(made), "\n"])
    return rollout_segments(carried, digest, whole_lines(cache).count("\n"))


def unpacked(archive: Path, made: dict, path: Path, marker: Path) -> tuple[Path, list[dict]]:
    """The committed slice set ``archive`` (a header line, then ``slices.jsonl`` verbatim, so its
    content hash is the same) written to ``path``; refused when made with other settings."""
    header, rows = committed(archive, made)
    atomic_write_text(path, [rows])
    atomic_write_text(marker, [json.dumps(made), "\n"])
    print(f"slice set from {archive} (rollouts of {header['rollouts_from']})", flush=True)
    return path, header["rollouts_from"]


def committed(archive: Path, made: dict) -> tuple[dict, str]:
    """A committed file's header and body; refused when made with other settings."""
    header, _, body = read_text(archive).partition("\n")
    header = json.loads(header)
    if header["made_with"] != made:
        raise SystemExit(f"{archive} was made with {json.dumps(header['made_with'])}, not these "
                         f"settings ({json.dumps(made)}); rerun with the same arguments, or give "
                         "another --archive to start anew")
    return header, body


def carried_rollouts(archive: Path, cache: Path, made: dict) -> list[dict]:
    """The rollouts earlier sessions committed in ``archive``, put in this run's rollout cache
    (unless it holds more) so the sampler goes on after them; their segments (as
    ``slice_set``'s), none when nothing was committed."""
    if not archive.is_file():
        return []
    header, rows = committed(archive, made)
    if whole_lines(cache).count("\n") < rows.count("\n"):
        atomic_write_text(cache, [rows])
    return header["segments"]


def rollout_segments(carried: list[dict], digest: str, rollouts: int) -> list[dict]:
    """``carried``, then this run's start for the rest of ``rollouts`` (merged into the last
    segment when it is the same start)."""
    new = rollouts - sum(s["rollouts"] for s in carried)
    if new <= 0:
        return carried
    if carried and carried[-1]["start"] == digest:
        return carried[:-1] + [{"start": digest, "rollouts": carried[-1]["rollouts"] + new}]
    return carried + [{"start": digest, "rollouts": new}]


@contextlib.contextmanager
def packed_rollouts(cache: Path, archive: Path | None, made: dict, carried: list[dict],
                    digest: str, every_s: float = 300.0) -> Iterator[None]:
    """While the body samples, pack the rollout cache into ``archive`` every ``every_s`` seconds
    and once when it ends, finished or not (nothing when ``archive`` is None)."""
    if archive is None:
        yield
        return

    def pack() -> None:
        rows = whole_lines(cache)
        if rows:
            header = {"made_with": made,
                      "segments": rollout_segments(carried, digest, rows.count("\n"))}
            write_text(archive, json.dumps(header) + "\n" + rows)

    def keep_packing() -> None:
        while not stop.wait(every_s):
            pack()

    stop = threading.Event()
    packer = threading.Thread(target=keep_packing, daemon=True)
    packer.start()
    try:
        yield
    finally:
        stop.set()
        packer.join()
        pack()


def epoch_history(run_id: str) -> list[dict[str, float]]:
    """Each epoch's AUROC and loss on the dev slices, as the run logged them."""
    import mlflow

    client = mlflow.MlflowClient()
    series = {k: sorted(client.get_metric_history(run_id, f"sft/dev_{k}"),
                        key=lambda m: m.step) for k in ("auroc", "loss")}
    return [{"epoch": a.step + 1, "auroc": a.value, "loss": b.value}
            for a, b in zip(series["auroc"], series["loss"], strict=True)]


def evidence_left_out(run_id: str) -> float:
    """The passages ``evidence_tokens`` left out of the run's judge examples."""
    import mlflow

    return mlflow.MlflowClient().get_run(run_id).data.metrics["sft/evidence_left_out"]


def heldout_intervals(run_id: str) -> dict[str, list[float]]:
    """95% intervals of the measured held-out AUROC (every slice, one without a P(yes) at 0.5),
    over all slices and per source with both labels, resampling whole questions (a question's
    slices share its facts): ``{"all" | source: [lo, hi]}``."""
    from advrag.core.metrics import clustered_auroc_ci
    from advrag.tasks import tracking

    rows = tracking.read_table(run_id, "heldout/judgments.json")
    groups = {"all": rows} | {source: [r for r in rows if r["id"].split("/")[1] == source]
                              for source in sorted({r["id"].split("/")[1] for r in rows})}
    return {name: list(clustered_auroc_ci(
        [r["sound"] for r in group], [0.5 if r["p_yes"] is None else r["p_yes"] for r in group],
        [r["id"].split("/")[0] for r in group], n_boot=2000)[1:])
        for name, group in groups.items() if len({r["sound"] for r in group}) == 2}


def parts(config: DiscriminatorSFTConfig, rows: list[dict]) -> list[dict]:
    """The slice rows with the held-out ones that chose the epoch marked ``"split": "dev"``
    (``parted``), so the report counts the training, dev and measured held-out slices."""
    from advrag.tasks.discriminator import parted

    dev = {r["id"] for r in parted(config, rows)[0]}
    return [r | {"split": "dev"} if r["id"] in dev else r for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", required=True, help="the start policy (a model directory)")
    parser.add_argument("--name", default="pipeline")
    parser.add_argument("--questions", type=int, default=None, help="training questions; all")
    parser.add_argument("--heldout-fraction", type=float, default=0.5)
    parser.add_argument("--rollouts", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--archive", type=Path, default=None,
                        help="a directory to commit: the rollouts as sampled and the slice set "
                             "once built; a later session's run goes on from what it holds")
    args = parser.parse_args()
    offline_world()
    from advrag.datasets.records import read_jsonl
    from advrag.flows.discriminator_sft import discriminator_sft

    config = judge_config(args)
    slices, rollouts_from = slice_set(config, args)
    result = discriminator_sft(config.model_copy(update={"slices": slices}), base=args.start)
    rows = parts(config, list(read_jsonl(result["slices"])))
    command = (f"python bench/learning/bench_judge.py --start {args.start} --name {args.name} "
               + (f"--questions {args.questions} " if args.questions else "")
               + f"--heldout-fraction {args.heldout_fraction} --rollouts {args.rollouts} "
               f"--epochs {args.epochs}"
               + (f" --archive {args.archive}" if args.archive else ""))
    write_report(ROOT / f"bench/results/judge-{args.name}.json", {
        "command": command, "start": args.start,
        "start_digest": model_digest(resolve_model_dir(args.start)),
        "rollouts_from": rollouts_from, "evidence_tokens": config.evidence_tokens,
        "dev_fraction": config.dev_fraction,
        "slices": {f"{split}/{source}": n for (split, source), n in sorted(
            Counter((r["split"], r["source"]) for r in rows).items())},
        "run_id": result["run_id"], "heldout": result["metrics"],
        "heldout_auroc_ci": heldout_intervals(result["run_id"]), "training": result["training"],
        "evidence_left_out": evidence_left_out(result["run_id"]),
        "epochs": epoch_history(result["run_id"])})


if __name__ == "__main__":
    main()
