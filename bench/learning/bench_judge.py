"""GAR's judge against the evidence: held-out AUROC on slices of held-out questions.

    python bench/learning/bench_judge.py --start PATH [--name NAME] [--questions N]
        [--heldout-fraction F] [--rollouts K] [--epochs E] [--slices-archive FILE.jsonl.gz]

Runs the ``discriminator-sft`` flow (``configs/discriminator.yaml`` with these overrides) on the
world's training questions from ``--start`` (the chosen warm-up: the policy GAR trains and whose
rollouts, ``--rollouts K`` of each question, add slices of its own reasoning). The flow labels the
slices with the grounded judge, splits them by question, fine-tunes the judge with early stopping
on the held-out AUROC and measures the kept epoch on the held-out slices. Writes
``bench/results/judge-<name>.json``: the held-out measures over all slices and per source
(demonstration, corrupted, rollout), the slice counts per split and source, each epoch's held-out
AUROC and loss, and the passages the evidence cap left out. The protocol and its targets are in
``docs/gar-experiments.md``. Resumable: the labelled slice set is built once
(``.cache/advrag/judge/<name>/slices``) and each finished SFT epoch is kept until the SFT ends,
so a rerun of the same command goes on where a killed one stopped. Across sessions (whose
``.cache/`` does not survive), ``--slices-archive`` commits the slice set once it is built, and a
later session's run unpacks it and goes straight to the SFT; the report names the start the SFT
ran on and the start whose rollouts the set holds, by the digests of their weights.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from advrag.common.fileio import atomic_write_text
from advrag.config import load_config
from advrag.models.loading import resolve_model_dir
from advrag.recipes.gar import DiscriminatorSFTConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from arm_records import model_digest, read_text, write_text
from inputs import offline_world
from reporting import write_report

ROOT = Path(__file__).resolve().parents[2]


def judge_config(args: argparse.Namespace) -> DiscriminatorSFTConfig:
    """``configs/discriminator.yaml`` with the run's overrides, in a checkpoint dir of its own."""
    config = load_config(ROOT / "configs/discriminator.yaml", DiscriminatorSFTConfig)
    return config.model_copy(update={
        "questions": args.questions, "heldout_fraction": args.heldout_fraction,
        "rollouts": args.rollouts, "sft": config.sft.model_copy(update={"epochs": args.epochs}),
        "checkpoint_dir": ROOT / ".cache/advrag/judge" / args.name,
        "out_dir": ROOT / ".cache/advrag/judge" / args.name / "slices",
        "experiment": "advrag-bench-judge"})


def slice_set(config: DiscriminatorSFTConfig, args: argparse.Namespace) -> tuple[Path, str]:
    """The run's labelled slice set and the digest of the start whose rollouts it holds.

    Built once (the ``gar-slices`` flow, from ``--start``) and reused by a rerun of the same
    arguments, so a killed run does not label again; refused when it was made with other ones.
    With ``--slices-archive``, a set committed there by an earlier session is unpacked instead
    (a session's ``.cache/`` does not outlive it, and sampling the rollouts takes most of one),
    and a set built here is committed there."""
    from advrag.flows.discriminator_sft import gar_slices

    made = {"start": args.start, **config.model_dump(mode="json", exclude={
        "sft", "patience", "checkpoint_dir", "out_dir", "slices", "experiment",
        "registered_model"})}  # what the slices depend on
    path, marker = config.out_dir / "slices.jsonl", config.out_dir / "made-with.json"
    archive = args.slices_archive
    if archive is not None and archive.is_file():
        return unpacked(archive, made, path, marker)
    if path.is_file() and marker.is_file():
        if json.loads(marker.read_text()) != made:
            raise SystemExit(f"{config.out_dir} holds slices made with {marker.read_text()}; "
                             "use another --name or delete it")
    else:
        gar_slices(config, base=args.start)
        marker.write_text(json.dumps(made) + "\n")
    digest = model_digest(resolve_model_dir(args.start))
    if archive is not None:
        header = {"made_with": made, "rollouts_from": digest}
        write_text(archive, json.dumps(header) + "\n" + path.read_text())
        print(f"committed the slice set: {archive} (rollouts of start {digest})", flush=True)
    return path, digest


def unpacked(archive: Path, made: dict, path: Path, marker: Path) -> tuple[Path, str]:
    """The committed slice set ``archive`` (a header line, then ``slices.jsonl`` verbatim, so its
    content hash is the same) written to ``path``; refused when made with other settings."""
    header, _, rows = read_text(archive).partition("\n")
    header = json.loads(header)
    if header["made_with"] != made:
        raise SystemExit(f"{archive} holds slices made with {json.dumps(header['made_with'])}, "
                         f"not these settings ({json.dumps(made)}); rerun with the same "
                         "arguments, or give another --slices-archive to build a new set")
    atomic_write_text(path, [rows])
    atomic_write_text(marker, [json.dumps(made), "\n"])
    print(f"slice set from {archive} (rollouts of start {header['rollouts_from']})", flush=True)
    return path, header["rollouts_from"]


def epoch_history(run_id: str) -> list[dict[str, float]]:
    """Each epoch's held-out AUROC and loss, as the run logged them."""
    import mlflow

    client = mlflow.MlflowClient()
    series = {k: sorted(client.get_metric_history(run_id, f"sft/heldout_{k}"),
                        key=lambda m: m.step) for k in ("auroc", "loss")}
    return [{"epoch": a.step + 1, "auroc": a.value, "loss": b.value}
            for a, b in zip(series["auroc"], series["loss"], strict=True)]


def evidence_left_out(run_id: str) -> float:
    """The passages ``evidence_tokens`` left out of the run's judge examples."""
    import mlflow

    return mlflow.MlflowClient().get_run(run_id).data.metrics["sft/evidence_left_out"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", required=True, help="the start policy (a model directory)")
    parser.add_argument("--name", default="pipeline")
    parser.add_argument("--questions", type=int, default=None, help="training questions; all")
    parser.add_argument("--heldout-fraction", type=float, default=0.5)
    parser.add_argument("--rollouts", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--slices-archive", type=Path, default=None,
                        help="a committed slice set (.jsonl.gz): unpacked when there, else "
                             "written there once built")
    args = parser.parse_args()
    offline_world()
    from advrag.datasets.records import read_jsonl
    from advrag.flows.discriminator_sft import discriminator_sft

    config = judge_config(args)
    slices, rollouts_from = slice_set(config, args)
    result = discriminator_sft(config.model_copy(update={"slices": slices}), base=args.start)
    rows = list(read_jsonl(result["slices"]))
    command = (f"python bench/learning/bench_judge.py --start {args.start} --name {args.name} "
               + (f"--questions {args.questions} " if args.questions else "")
               + f"--heldout-fraction {args.heldout_fraction} --rollouts {args.rollouts} "
               f"--epochs {args.epochs}"
               + (f" --slices-archive {args.slices_archive}" if args.slices_archive else ""))
    write_report(ROOT / f"bench/results/judge-{args.name}.json", {
        "command": command, "start": args.start,
        "start_digest": model_digest(resolve_model_dir(args.start)),
        "rollouts_from": rollouts_from, "evidence_tokens": config.evidence_tokens,
        "slices": {f"{split}/{source}": n for (split, source), n in sorted(
            Counter((r["split"], r["source"]) for r in rows).items())},
        "heldout": result["metrics"], "training": result["training"],
        "evidence_left_out": evidence_left_out(result["run_id"]),
        "epochs": epoch_history(result["run_id"])})


if __name__ == "__main__":
    main()
