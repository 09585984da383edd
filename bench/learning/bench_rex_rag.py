"""REX-RAG learning evidence: REX-RAG vs GRPO from one start policy, same updates, several seeds.

    python bench/learning/bench_rex_rag.py [--config configs/rex-rag.yaml] [--seeds 0 1 2] \
        [--steps 24] [--questions-per-step 2] [--heldout 100] [--start MODEL_DIR] \
        [--records DIR] [--ur2-config configs/ur2-raw-docs.yaml]

The protocol (declared in docs/rex-rag-experiments.md before any run):

1. **Start policy**: ``--start`` (a saved model, e.g. the chaining warm-up of
   docs/chaining-experiments.md), or else the config's SFT warm-up (four turns, so its
   demonstrations include three-hop chains), trained once (by the first arm, ``rex`` of the
   first seed); either way shared by every arm and seed.
2. **Two arms per seed**, the same ``--steps`` updates of the same questions per update:
   ``rex`` (the config: probes, filter, correction) and ``grpo`` (the config with
   ``exploration: null``). Only ``optim.seed`` changes between seeds.
3. **Held-out evaluation** of the start policy and every arm: greedy Search-R1 with the
   config's turn budget on the first ``--heldout`` questions of the world's test split
   (never used for a choice). Per arm: EM/F1 with 95 % intervals, searches per question;
   per question kind (single, two-hop, three-hop, comparison) F1 and searches.
4. **The test**: per question, each arm's F1 averaged over the seeds; the 95 % paired
   bootstrap interval of rex − grpo over the multi-hop questions (two-hop, three-hop,
   comparison); of each arm − its start on the chained questions (F1, searches) and of
   searches per multi-hop question. Each arm is paired with the start it trained from.
5. **UR²** (with ``--ur2-config``, which needs ``--start``): one more arm, ``ur2`` of the first
   seed, after the others: that config's recipe (curation with the start, stage 1, stage 2,
   REINFORCE++) at the same budget from the same start, scored as the others. Its curation's
   rollouts are not counted in the budget; its record keeps their signal and the seconds they
   took (``wall_s`` − ``train_s``). The test adds ur2 − its start and ur2 − grpo (seed means,
   and gain against gain) once it has run.

Each arm trains in a child process, which scores it (and, once, the start it trained from) on
the held-out questions and writes its committed record ``<records>/<arm>-seed<k>.json``
(``arm_records``; ``--records`` defaults to ``--out`` without ``.json``): the arms run over
several sessions, and a rerun trains only the arms without a record (within a session, from
their checkpoints in ``--cache-dir``). After each arm, ``--out``
(``bench/results/rex-rag.json``) is written from the records so far, with
``rex-rag_rows.jsonl`` (each policy's score per held-out question) and ``rex-rag_curves.png``
(per-update curves of every run) beside it; the declared test once every arm has run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from advrag.config import load_config
from advrag.core.metrics import bootstrap_ci, paired_bootstrap_diff_ci
from advrag.datasets.records import question_kind
from advrag.evaluation.scoring import hop_rates
from advrag.recipes.grpo import GrpoConfig
from advrag.recipes.ur2 import UR2Config
from advrag.tasks import tracking

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from arm_records import ArmRecords, model_digest
from bench_ur2 import ROW_KEYS, curation_signal, write_rows
from bench_ur2 import evaluate as search_r1_rows
from inputs import offline_world
from reporting import child_json, cpu_description, write_report

MULTI_HOP = ("two-hop", "three-hop", "comparison")
CHAINED = ("two-hop", "three-hop")
ARMS = ("grpo", "rex")
"""Trained in this order for each seed: GRPO is also the adversarial protocol's baseline."""
UR2_ARM = "ur2"
"""Trained once, for the first seed, after every seed of ``ARMS`` (``--ur2-config``)."""
SAME_SETTINGS = ("world_dir", "index_dir", "topk", "max_turns", "max_new_tokens",
                 "group_size")
"""What the UR² config must share with ``--config``: the arms differ only in their recipe."""
RECORD_KEYS = (*ROW_KEYS, "cut_turns", "kind")
BEHAVIOUR_KEYS = ("queries", "retrieved_ids", "hops_retrieved", "chained")
"""What a record keeps besides the scores, where a row has it (a world question's hops):
the searches' queries and passage ids, which gold hops came back, which queries chained.
Records written before 2026-12-05 (the start ``ae5f3a65…`` and ``grpo-seed0``) lack them."""
CURVES = ("reward_mean", "searches", "rex/probes_opened", "rex/probes_kept",
          "rex/policy_accuracy", "rex/probe_accuracy", "rex/keep_ratio")
UR2_CURVES = ("reward_mean", "searches", "ur2/stage", "ur2/correct", "ur2/valid_queries",
              "informative_groups", "uncurated_pool")
"""The UR² arm's per-update curves: ``uncurated_pool`` = 1 where its stage's pool was empty."""
PROBES_OPENED, PROBES_CORRECT = "rex/probes_opened/", "rex/probes_correct/"
"""The prefixes of the probes a REX-RAG update opened, and of those right, per question kind."""
PROBE_OUTCOMES = ("rex/probe_new_searches", "rex/probe_same_answer", "rex/probe_unanswered",
                  "rex/probe_f1", "rex/probe_origin_f1")
"""What the probes did, each a mean over one update's probes (``rex_rag.step.probe_outcomes``).
Records written before 2026-12-06 lack them."""


def arm_settings(config: GrpoConfig | UR2Config, arm: str, seed: int, steps: int,
                 root: Path) -> dict:
    """What every arm of one seed sets: its checkpoints under ``root`` (at most 8 updates
    apart, so a killed run loses little), ``steps`` updates, its seed, no benchmark."""
    return {"checkpoint_dir": root / f"{arm}-seed{seed}", "steps": steps,
            "checkpoint_every": max(min(steps // 3, 8), 1), "evaluate": None,
            "experiment": "advrag-bench-rex-rag",
            "registered_model": f"advrag-bench-rex-rag-{arm}-seed{seed}",
            "optim": config.optim.model_copy(update={"seed": seed})}


def arm_config(config: GrpoConfig, arm: str, seed: int, steps: int, root: Path) -> GrpoConfig:
    """One GRPO or REX-RAG arm of one seed (``arm_settings``)."""
    update = arm_settings(config, arm, seed, steps, root)
    if arm == "grpo":
        update["exploration"] = None
    return config.model_copy(update=update)


def ur2_arm_config(config: UR2Config, start: Path, seed: int, steps: int,
                   questions_per_step: int, root: Path) -> UR2Config:
    """The UR² arm: from ``start`` (no warm-up of its own), the other arms' budget and
    settings (``arm_settings``), its curation and curation cache under ``root``."""
    curate = config.curate and config.curate.model_copy(
        update={"out_dir": root / f"{UR2_ARM}-curation", "cache_dir": root / "curation-cache"})
    return config.model_copy(update=arm_settings(config, UR2_ARM, seed, steps, root) | {
        "model": str(start), "warmup": None, "questions_per_step": questions_per_step,
        "curate": curate})


def settings_differ(ur2: UR2Config, base: GrpoConfig) -> list[str]:
    """The ``SAME_SETTINGS`` in which the UR² config departs from the GRPO arms' config."""
    return [f"{key}: {getattr(ur2, key)} against {getattr(base, key)}" for key in SAME_SETTINGS
            if getattr(ur2, key) != getattr(base, key)]


def train_arm(config: GrpoConfig | UR2Config, name: str, warmup: Path | None) -> dict:
    """Run the config's recipe for one arm (starting from ``warmup`` when given); its run,
    seconds (all, and those of the updates) and curves."""
    from advrag.flows.rl import run_recipe
    from advrag.recipes import recipe_named

    if warmup is not None and not (config.checkpoint_dir / "warmup").exists():
        shutil.copytree(warmup, config.checkpoint_dir / "warmup")
    started = time.perf_counter()
    result = run_recipe(recipe_named(config.RECIPE)(config), "bench-rex-rag", name)
    keys = UR2_CURVES if config.RECIPE == UR2_ARM else CURVES
    return {"run_id": result["run_id"], "model_dir": str(result["model_dir"]),
            "steps_run": result["steps_run"], "wall_s": time.perf_counter() - started,
            "train_s": result["train_s"], "curves": curves(result["run_id"], keys),
            "probe_outcomes": probe_outcomes(result["run_id"])}


def curves(run_id: str, keys: tuple[str, ...] = CURVES) -> dict[str, list[float]]:
    """The per-update ``keys`` of one MLflow run, and its probes per question kind (logged
    only at the updates that opened one of that kind)."""
    client = tracking.client()
    keys = [*keys, *sorted(key for key in client.get_run(run_id).data.metrics
                           if key.startswith((PROBES_OPENED, PROBES_CORRECT)))]
    return {key: [m.value for m in sorted(client.get_metric_history(run_id, key),
                                          key=lambda m: m.step)] for key in keys}


def probe_outcomes(run_id: str) -> dict[str, float]:
    """Each of ``PROBE_OUTCOMES`` over every probe of the run: the updates' means weighted by
    the probes each opened (logged only at updates that opened one); empty without probes."""
    client = tracking.client()
    opened = {m.step: m.value for m in client.get_metric_history(run_id, "rex/probes_opened")}
    histories = {key: client.get_metric_history(run_id, key) for key in PROBE_OUTCOMES}
    total = sum(opened[m.step] for m in histories[PROBE_OUTCOMES[0]])
    return {key: sum(m.value * opened[m.step] for m in history) / total
            for key, history in histories.items()} if total else {}


def probe_totals(run_curves: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Per question kind, the probes a run opened and those that earned full marks, summed
    over its updates, and their ratio: which kinds the exploration prompts rescue."""
    totals = {}
    for key, opened in run_curves.items():
        if key.startswith(PROBES_OPENED):
            kind = key.removeprefix(PROBES_OPENED)
            correct = sum(run_curves[PROBES_CORRECT + kind])
            totals[kind] = {"opened": sum(opened), "correct": correct,
                            "accuracy": correct / sum(opened)}
    return totals


def train_in_child(args: argparse.Namespace, records: ArmRecords, name: str) -> None:
    """Train and score arm ``name`` in a child process, which writes its record (each arm's
    rollout engine and policy are freed when it exits; in one process they piled up)."""
    arm, seed = name.split("-seed")
    start = ["--start", str(args.start)] if args.start else []
    ur2 = ["--ur2-config", args.ur2_config] if args.ur2_config else []
    child_json([sys.executable, __file__, "--config", args.config, "--steps", str(args.steps),
                "--questions-per-step", str(args.questions_per_step), *start, *ur2,
                "--heldout", str(args.heldout), "--cache-dir", str(args.cache_dir),
                "--records", str(records.directory), "--arm", arm, "--seeds", seed])


def train_one(args: argparse.Namespace, base: GrpoConfig, records: ArmRecords) -> None:
    """The child's work: train ``--arm`` for its seed from the shared start, score it and its
    start (once per start) on the held-out questions, write its record."""
    seed, name = args.seeds[0], f"{args.arm}-seed{args.seeds[0]}"
    shared = args.cache_dir / "rex-seed0" / "warmup"  # the first arm's, when no --start
    warmup = shared if not args.start and shared.is_dir() else None
    if args.arm == UR2_ARM:
        config = ur2_arm_config(load_config(args.ur2_config, UR2Config), args.start, seed,
                                args.steps, base.questions_per_step, args.cache_dir)
    else:
        config = arm_config(base, args.arm, seed, args.steps, args.cache_dir)
    training = train_arm(config, name, warmup)
    start = args.start or config.checkpoint_dir / "warmup"
    digest = model_digest(start)
    records.start_rows(digest, lambda: kept_columns(evaluate(str(start), base, args.heldout)))
    curation = ({"curation": curation_signal(config) if config.curate else None}
                if args.arm == UR2_ARM else {})
    records.write(name, {"arm": args.arm, "seed": seed, "start": str(start),
                         "start_digest": digest, "steps": args.steps,
                         "questions_per_step": base.questions_per_step,
                         "group_size": base.group_size, "cpu": cpu_description(),
                         "training": training, **curation, "rows": kept_columns(
                             evaluate(training["model_dir"], base, args.heldout))})
    print(json.dumps({"arm": name, "steps_run": training["steps_run"]}))


def kept_columns(rows: list[dict]) -> list[dict]:
    """The columns a record keeps of each scored row (no transcripts)."""
    return [{key: row[key] for key in RECORD_KEYS}
            | {key: row[key] for key in BEHAVIOUR_KEYS if key in row} for row in rows]


def evaluate(model: str, config: GrpoConfig, n: int) -> list[dict]:
    """Greedy Search-R1 with the config's turn and token budgets (its ``evaluate`` section's,
    the budgets the start was benchmarked with) on the first ``n`` test questions
    (``bench_ur2.evaluate``), each row with its question kind."""
    from advrag.datasets.loaders import load_qa

    budgets = config.evaluate or config
    rows = search_r1_rows(model, config, n, max_turns=budgets.max_turns,
                          max_new_tokens=budgets.max_new_tokens)
    records = load_qa(config.world_dir / "test.jsonl", limit=n)
    for row, record in zip(rows, records, strict=True):
        row["kind"] = question_kind(record)
    return rows


def summary(rows: list[dict]) -> dict:
    """EM/F1 with 95 % intervals and searches, overall and per question kind."""
    out: dict = {"n": len(rows)}
    for key in ("em", "f1"):
        mean, lo, hi = bootstrap_ci([r[key] for r in rows], n_boot=2000)
        out[key] = {"mean": mean, "ci95": [lo, hi]}
    out["searches"] = sum(r["n_searches"] for r in rows) / len(rows)
    out["cut_turns"] = sum(r["cut_turns"] for r in rows) / len(rows)  # by max_new_tokens
    kinds = sorted({r["kind"] for r in rows})
    out["by_kind"] = {kind: {"n": len(part), "f1": sum(r["f1"] for r in part) / len(part),
                             "searches": sum(r["n_searches"] for r in part) / len(part),
                             **hop_rates(part)}
                      for kind in kinds for part in [[r for r in rows if r["kind"] == kind]]}
    return out



def seed_mean(runs: list[list[dict]], key: str) -> list[float]:
    """Per question (same order in every run), ``key`` averaged over the runs (seeds)."""
    return [sum(run[i][key] for run in runs) / len(runs) for i in range(len(runs[0]))]


def paired(a: list[float], b: list[float]) -> dict:
    """a − b on the same questions: mean and 95 % paired-bootstrap interval."""
    diff, lo, hi = paired_bootstrap_diff_ci(a, b, n_boot=2000)
    return {"diff": diff, "ci95": [lo, hi], "n": len(a)}


def the_test(rows: dict[str, list[dict]], starts: dict[str, list[dict]],
             seeds: list[int]) -> dict:
    """The declared comparisons, per question on seed means: rex − grpo over the multi-hop
    questions (and over all, for context); each arm − its own start on the chained questions
    (F1, searches) and on the multi-hop ones (searches). ``starts[name]`` is arm ``name``'s
    start's rows. Beside them, for arms from starts rebuilt on different CPUs, rex's gain over
    its own starts against grpo's on the multi-hop questions (the same as rex − grpo where
    every arm began from one start). Where ``rows`` holds the UR² arm (first seed only), the
    same against its start, and ur2 − grpo and gain against gain on the multi-hop questions."""
    kinds = [r["kind"] for r in rows[f"grpo-seed{seeds[0]}"]]
    multi = [i for i, kind in enumerate(kinds) if kind in MULTI_HOP]
    chained = [i for i, kind in enumerate(kinds) if kind in CHAINED]
    arm_seeds = {arm: seeds for arm in ARMS}
    if f"{UR2_ARM}-seed{seeds[0]}" in rows:
        arm_seeds[UR2_ARM] = seeds[:1]

    def mean(name: str, key: str, own_start: bool = False) -> list[float]:
        return seed_mean([(starts if own_start else rows)[f"{name}-seed{s}"]
                          for s in arm_seeds[name]], key)

    def pick(values: list[float], where: list[int]) -> list[float]:
        return [values[i] for i in where]

    def gain(name: str) -> list[float]:
        return [a - b for a, b in zip(mean(name, "f1"), mean(name, "f1", own_start=True))]

    out = {"multi_hop_questions": len(multi), "chained_questions": len(chained),
           "rex-grpo_f1_multi_hop": paired(pick(mean("rex", "f1"), multi),
                                           pick(mean("grpo", "f1"), multi)),
           "rex-grpo_f1_all": paired(mean("rex", "f1"), mean("grpo", "f1")),
           "rex-grpo_gain_f1_multi_hop": paired(pick(gain("rex"), multi), pick(gain("grpo"), multi)),
           "per_seed_rex-grpo_f1_multi_hop": {
               str(s): paired(pick([r["f1"] for r in rows[f"rex-seed{s}"]], multi),
                              pick([r["f1"] for r in rows[f"grpo-seed{s}"]], multi))
               for s in seeds}}
    if UR2_ARM in arm_seeds:
        out["ur2-grpo_f1_multi_hop"] = paired(pick(mean(UR2_ARM, "f1"), multi),
                                              pick(mean("grpo", "f1"), multi))
        out["ur2-grpo_gain_f1_multi_hop"] = paired(pick(gain(UR2_ARM), multi),
                                                   pick(gain("grpo"), multi))
    for arm in arm_seeds:
        out[f"{arm}-start_f1_chained"] = paired(pick(mean(arm, "f1"), chained),
                                                pick(mean(arm, "f1", own_start=True), chained))
        for where, part in (("multi_hop", multi), ("chained", chained)):
            out[f"{arm}-start_searches_{where}"] = paired(
                pick(mean(arm, "n_searches"), part),
                pick(mean(arm, "n_searches", own_start=True), part))
    return out


def against_start(rows: list[dict], start: list[dict]) -> dict:
    """One arm of one seed − its start, per question: F1 on the chained and on the multi-hop
    questions, searches on the chained ones."""
    def part(kinds: tuple[str, ...], key: str) -> dict:
        pairs = [(r[key], s[key]) for r, s in zip(rows, start, strict=True) if r["kind"] in kinds]
        return paired([a for a, _ in pairs], [b for _, b in pairs])

    return {"f1_chained": part(CHAINED, "f1"), "f1_multi_hop": part(MULTI_HOP, "f1"),
            "searches_chained": part(CHAINED, "n_searches")}


def curves_figure(arms: dict[str, dict]):
    """Per-update reward, searches, probes and accuracies of every run (each run's own
    curves: UR²'s has no probes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.5))
    panels = (("reward_mean",), ("searches",), ("rex/probes_opened", "rex/probes_kept"),
              ("rex/policy_accuracy", "rex/probe_accuracy", "ur2/correct"))
    for ax, keys in zip(axes, panels):
        for name, arm in arms.items():
            for key in keys:
                if arm["curves"].get(key):
                    ax.plot(arm["curves"][key], marker=".", label=f"{name} {key}")
        ax.set_title(" / ".join(keys))
        ax.set_xlabel("update")
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/rex-rag.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=24, help="updates per arm and seed")
    parser.add_argument("--questions-per-step", type=int, default=None,
                        help="override the config's questions_per_step (each a group of group_size)")
    parser.add_argument("--heldout", type=int, default=100, help="test questions evaluated")
    parser.add_argument("--start", type=Path, default=None,
                        help="a saved model every arm starts from (default: the config's warm-up)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/rex-rag.json"))
    parser.add_argument("--cache-dir", type=Path, default=Path(".cache/advrag/bench-rex-rag"))
    parser.add_argument("--records", type=Path, default=None,
                        help="the arms' committed records (default: --out without .json)")
    parser.add_argument("--start-only", action="store_true",
                        help="score --start on the held-out questions (once per start) and stop")
    parser.add_argument("--ur2-config", default=None,
                        help="also train the UR² arm (first seed, after the others) with this "
                             "ur2 config, e.g. configs/ur2-raw-docs.yaml; needs --start")
    parser.add_argument("--arm", choices=(*ARMS, UR2_ARM), default=None,
                        help="(child process) train this arm for the one seed of --seeds")
    args = parser.parse_args()
    offline_world()
    tracking.configure()
    base = load_config(args.config, GrpoConfig)
    if base.exploration is None:
        parser.error(f"--config {args.config}: no exploration: section, nothing to compare")
    if args.start_only and not args.start:
        parser.error("--start-only scores --start: give it")
    if args.start and not (args.start / "config.json").is_file():
        parser.error(f"--start {args.start}: no saved model there (no config.json)")
    if args.ur2_config:
        check_ur2_config(parser, args, base)
    if args.start:  # RL starts from it: no warm-up of the config's own
        base = base.model_copy(update={"model": str(args.start), "warmup": None})
    if args.questions_per_step:
        base = base.model_copy(update={"questions_per_step": args.questions_per_step})
    args.questions_per_step = base.questions_per_step
    records = ArmRecords(args.records or args.out.with_suffix(""))
    if args.arm:
        return train_one(args, base, records)
    if args.start:  # scored (and committed) first: a session that ends mid-arm keeps it
        records.start_rows(model_digest(args.start),
                           lambda: kept_columns(evaluate(str(args.start), base, args.heldout)))
    if args.start_only:
        return print(f"the start {args.start} is scored in {records.directory}")
    names = [f"{arm}-seed{seed}" for seed in args.seeds for arm in ARMS]
    names += [f"{UR2_ARM}-seed{args.seeds[0]}"] if args.ur2_config else []
    for name in names:
        if records.load(name) is None:
            train_in_child(args, records, name)
            write_aggregate(args, base, records, names)  # a killed session keeps what finished
    write_aggregate(args, base, records, names)


def check_ur2_config(parser: argparse.ArgumentParser, args: argparse.Namespace,
                     base: GrpoConfig) -> None:
    """Refuse a UR² arm that could not be compared: no shared start, or other settings."""
    if not args.start:
        parser.error("--ur2-config: the UR² arm starts from the other arms' start: give --start "
                     "(a warm-up of the GRPO config's is made under another prompt)")
    differ = settings_differ(load_config(args.ur2_config, UR2Config), base)
    if differ:
        parser.error(f"--ur2-config {args.ur2_config} differs from --config {args.config} in "
                     f"{'; '.join(differ)}: set them alike so the arms differ only in their recipe")


def write_aggregate(args: argparse.Namespace, base: GrpoConfig, records: ArmRecords,
                    names: list[str]) -> None:
    """The protocol's record from the arms recorded so far; the declared test once every seed
    of ``ARMS`` is (with the UR² arm's comparisons once it is too)."""
    done = {name: record for name in names if (record := records.load(name)) is not None}
    tested = all(name in done for name in names if not name.startswith(UR2_ARM))
    if not done:
        return
    digests = sorted({record["start_digest"] for record in done.values()})
    start_rows = {d: records.load(f"start-{d}")["rows"] for d in digests}
    rows = {("start" if len(digests) == 1 else f"start-{d}"): r for d, r in start_rows.items()}
    rows |= {name: record["rows"] for name, record in done.items()}
    own_start = {name: start_rows[record["start_digest"]] for name, record in done.items()}
    report = {"config": args.config, "seeds": args.seeds, "steps": args.steps,
              "questions_per_step": base.questions_per_step, "group_size": base.group_size,
              "start": str(args.start) if args.start else "the config's warm-up",
              "start_digests": {name: record["start_digest"] for name, record in done.items()},
              "heldout": args.heldout, "max_turns": base.max_turns,
              "arms": {name: record["training"] | {k: record[k] for k in ("cpu", "finished")}
                       | {"probes_by_kind": probe_totals(record["training"]["curves"])}
                       | {key: record[key] for key in ("curation",) if key in record}
                       for name, record in done.items()},
              "arms_missing": [name for name in names if name not in done],
              "heldout_results": {name: summary(r) for name, r in rows.items()},
              "vs_own_start": {name: against_start(rows[name], own_start[name]) for name in done},
              "test": the_test(rows, own_start, args.seeds) if tested else None}
    write_report(args.out, report)
    write_rows(args.out.with_name(f"{args.out.stem}_rows.jsonl"), rows, keys=RECORD_KEYS)
    curves_figure({name: record["training"] for name, record in done.items()}).savefig(
        args.out.with_name(f"{args.out.stem}_curves.png"), dpi=110)

if __name__ == "__main__":
    main()
