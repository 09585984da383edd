"""ARR and GAR from the chaining start at GRPO's budget, several seeds, against the GRPO arms.

    python bench/learning/bench_adversarial.py --start MODEL_DIR --judge ADAPTER_DIR \
        [--grpo-records bench/results/rex-rag-chaining] [--seeds 0 1 2] [--steps 48] \
        [--questions-per-step 4] [--heldout 100] [--arms gar arr]

The protocol is declared in docs/chaining-experiments.md ("The adversarial protocol") before
any run:

1. **Arms**, each seed: ``gar`` (``configs/gar.yaml`` on ``--start``, no warm-up of its own, the
   discriminator from the judge's SFT adapter ``--judge``) and ``arr`` (``configs/arr.yaml`` with
   ``--start`` as its model and its own dialogue warm-up on top); ``--steps`` updates of
   ``--questions-per-step`` questions × ``group_size`` episodes. Only ``optim.seed`` changes
   between seeds.
2. **Held-out evaluation** on the first ``--heldout`` test questions: GAR's reasoner with greedy
   Search-R1 (the config's turns and new tokens), ARR's trained pair with the benchmark's ``arr``
   method; ARR's verifier rates also on as many dev questions.
3. **The test**: per question, each arm's F1 averaged over the seeds; the 95 % paired bootstrap
   interval of arm − GRPO over the multi-hop questions (and over all), the GRPO arms' rows read
   from the RL protocol's records (``--grpo-records``, the same questions).

Each arm trains in a child process, which scores it and writes its committed record
``<records>/<arm>-seed<k>.json`` (``arm_records``; ``--records`` defaults to ``--out`` without
``.json``): the arms run over several sessions, and a rerun trains only the arms without a
record. After each arm, ``--out`` (``bench/results/adversarial-chaining.json``) is written from
the records so far, with its ``_rows.jsonl`` beside it; the test once every arm, and every GRPO
arm it is paired with, has run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from advrag.config import load_config
from advrag.evaluation.scoring import summarize
from advrag.tasks import tracking

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from arm_records import ArmRecords, model_digest
from bench_rex_rag import MULTI_HOP, RECORD_KEYS, kept_columns, paired, seed_mean, summary
from bench_rex_rag import evaluate as search_r1_rows
from bench_ur2 import method_rows, write_rows
from inputs import offline_world
from reporting import child_json, cpu_description, write_report

ROOT = Path(__file__).resolve().parents[2]
ARMS = {"gar": "configs/gar.yaml", "arr": "configs/arr.yaml"}
CURVES = {"gar": ("reasoner/answer_score", "reasoner/slice_score", "discriminator/R_d",
                  "discriminator/R_a", "discriminator/score_reference",
                  "discriminator/score_generated"),
          "arr": ("reasoner/reward_mean", "verifier/reward_mean", "reasoner/f1", "verifier/f1",
                  "final/f1")}


def arm_config(args: argparse.Namespace, arm: str, seed: int):
    """One arm of one seed: its config file with the protocol's start, budget and names."""
    from advrag.recipes import RECIPES

    recipe = RECIPES[arm]
    config = load_config(ROOT / ARMS[arm], recipe.config_model)
    update = {"model": str(args.start), "steps": args.steps,
              "questions_per_step": args.questions_per_step, "group_size": 4,
              "checkpoint_dir": args.cache_dir / f"{arm}-seed{seed}", "checkpoint_every": 8,
              "evaluate": None, "experiment": "advrag-bench-adversarial",
              "optim": config.optim.model_copy(update={"seed": seed})}
    if arm == "gar":
        update |= {"warmup": None, "discriminator_adapter": args.judge,
                   "registered_reasoner": f"advrag-bench-adversarial-gar-r-seed{seed}",
                   "registered_discriminator": f"advrag-bench-adversarial-gar-d-seed{seed}"}
    else:
        update |= {"registered_reasoner": f"advrag-bench-adversarial-arr-r-seed{seed}",
                   "registered_verifier": f"advrag-bench-adversarial-arr-v-seed{seed}"}
    return recipe(config.model_copy(update=update))


def train_one(args: argparse.Namespace, records: ArmRecords) -> None:
    """The child's work: train ``--arm`` for its seed, score it on the held-out questions
    (ARR's verifier on as many dev questions too), write its record."""
    from advrag.flows.rl import run_recipe

    seed = args.seeds[0]
    name, recipe = f"{args.arm}-seed{seed}", arm_config(args, args.arm, seed)
    started = time.perf_counter()
    result = run_recipe(recipe, "bench-adversarial", name)
    client = tracking.client()
    training = {"run_id": result["run_id"], "model_dirs": result["model_dirs"],
                "steps_run": result["steps_run"], "wall_s": time.perf_counter() - started,
                "curves": {key: [m.value for m in sorted(client.get_metric_history(
                    result["run_id"], key), key=lambda m: m.step)] for key in CURVES[args.arm]}}
    record = {"arm": args.arm, "seed": seed, "start": str(args.start),
              "start_digest": model_digest(args.start), "judge": str(args.judge),
              "cpu": cpu_description(), "training": training}
    if args.arm == "gar":
        rows = search_r1_rows(result["model_dirs"]["reasoner"], recipe.config, args.heldout)
    else:
        rows = arr_rows(result["model_dirs"], recipe.config, args.heldout, "test")
        dev = arr_rows(result["model_dirs"], recipe.config, args.heldout, "dev")
        record["verifier"] = {k: v for k, v in summarize(rows + dev).items()
                              if k.startswith("verifier/")}
    records.write(name, record | {"rows": kept_columns(rows)})
    print(json.dumps({"arm": name, "steps_run": training["steps_run"]}))


def train_in_child(args: argparse.Namespace, records: ArmRecords, name: str) -> None:
    """Train and score arm ``name`` in a child process (which frees its engines when it exits),
    which writes its record."""
    arm, seed = name.split("-seed")
    child_json([sys.executable, __file__, "--start", str(args.start), "--judge", str(args.judge),
                "--steps", str(args.steps), "--questions-per-step", str(args.questions_per_step),
                "--heldout", str(args.heldout), "--cache-dir", str(args.cache_dir),
                "--records", str(records.directory), "--arm", arm, "--seeds", seed])


def arr_rows(model_dirs: dict[str, str], config, n: int, split: str) -> list[dict]:
    """The benchmark's ``arr`` method with the trained pair on the first ``n`` questions of
    ``split``: one scored row per question (its kind, both agents' answers)."""
    from advrag.config import BenchmarkConfig
    from advrag.datasets.loaders import load_qa
    from advrag.engines.local.generation import HFGenerator, pick_dtype
    from advrag.evaluation import methods
    from advrag.models.loading import load_policy

    settings = BenchmarkConfig(methods=["arr"], limit=n, max_turns=config.max_turns,
                               topk=config.topk, max_new_tokens=config.max_new_tokens,
                               batch_size=32)
    records = load_qa(config.world_dir / f"{split}.jsonl", limit=n)
    agents = {name: load_policy(model_dirs[name], dtype=pick_dtype("auto"))
              for name in ("reasoner", "verifier")}
    generators = methods.Generators(*(HFGenerator(agents[a].model, agents[a].tokenizer,
                                                  batch_size=32) for a in ("reasoner", "verifier")))
    return method_rows("arr", records, generators, config.index_dir, settings)


def grpo_records(directory: Path, seeds: list[int]) -> dict[str, dict]:
    """The RL protocol's GRPO arms that have run, per seed, from its records."""
    grpo = ArmRecords(directory)
    return {name: record for s in seeds
            if (record := grpo.load(name := f"grpo-seed{s}")) is not None}


def the_test(rows: dict[str, list[dict]], seeds: list[int]) -> dict:
    """Each adversarial arm − GRPO over the multi-hop questions (and over all), seed means."""
    multi = [i for i, r in enumerate(rows[f"grpo-seed{seeds[0]}"]) if r["kind"] in MULTI_HOP]
    f1 = {arm: seed_mean([rows[f"{arm}-seed{s}"] for s in seeds], "f1")
          for arm in ("grpo", *ARMS)}
    out: dict = {"multi_hop_questions": len(multi)}
    for arm in ARMS:
        out[f"{arm}-grpo_f1_multi_hop"] = paired([f1[arm][i] for i in multi],
                                                 [f1["grpo"][i] for i in multi])
        out[f"{arm}-grpo_f1_all"] = paired(f1[arm], f1["grpo"])
    return out


def start_rows(directory: Path, arms: dict[str, dict]) -> dict[str, list[dict]]:
    """The held-out rows of the arms' start, as the RL protocol scored it (its record
    ``start-<digest>`` in ``directory``): ``start``, or ``start-<digest>`` for each of several
    digests (a start rebuilt on another kind of CPU); none where it has no record."""
    digests = sorted({record["start_digest"] for record in arms.values()})
    found = {d: record["rows"] for d in digests
             if (record := ArmRecords(directory).load(f"start-{d}")) is not None}
    return {("start" if len(digests) == 1 else f"start-{d}"): r for d, r in found.items()}


def to_train(names: list[str], arms: list[str], records: ArmRecords) -> list[str]:
    """The arms of ``names`` (``<arm>-seed<k>``, in order) among ``arms`` without a record."""
    return [name for name in names
            if name.split("-seed")[0] in arms and records.load(name) is None]


def write_aggregate(args: argparse.Namespace, records: ArmRecords, names: list[str]) -> None:
    """The protocol's record from the arms recorded so far; the test once every arm and every
    GRPO arm has run."""
    done = {name: record for name in names if (record := records.load(name)) is not None}
    grpo = grpo_records(args.grpo_records, args.seeds)
    rows = start_rows(args.grpo_records, grpo | done)
    rows |= {name: record["rows"] for name, record in (grpo | done).items()}
    complete = len(done) == len(names) and len(grpo) == len(args.seeds)
    report = {"start": str(args.start), "judge": str(args.judge), "seeds": args.seeds,
              "steps": args.steps, "questions_per_step": args.questions_per_step,
              "heldout": args.heldout, "grpo_records": str(args.grpo_records),
              "start_digests": {name: record["start_digest"]
                                for name, record in (grpo | done).items()},
              "arms": {name: record["training"] | {k: record[k] for k in ("cpu", "finished")}
                       for name, record in done.items()},
              "arms_missing": [name for name in (*names, *(f"grpo-seed{s}" for s in args.seeds))
                               if name not in rows],
              "heldout_results": {name: summary(r) for name, r in rows.items()},
              "verifier": {name: record["verifier"] for name, record in done.items()
                           if "verifier" in record},
              "test": the_test(rows, args.seeds) if complete else None}
    write_report(args.out, report)
    write_rows(args.out.with_name(f"{args.out.stem}_rows.jsonl"), rows, keys=RECORD_KEYS)


def inputs_to_check(args: argparse.Namespace) -> list[tuple[str, Path, str]]:
    """The inputs this run reads, each with its flag and the command that builds it: the start
    always, the judge only where a GAR arm trains (ARR has no judge)."""
    arms = [args.arm] if args.arm else args.arms
    checks = [("--start", args.start / "config.json", "make chaining-start")]
    if "gar" in arms:
        checks.append(("--judge", args.judge, "make bench-judge"))
    return checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=Path, required=True, help="the chaining warm-up")
    parser.add_argument("--judge", type=Path, required=True,
                        help="the judge's SFT adapter on --start (bench_judge.py's); read by GAR only")
    parser.add_argument("--grpo-records", type=Path,
                        default=Path("bench/results/rex-rag-chaining"),
                        help="the RL protocol's arm records (bench_rex_rag.py's --records)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=48, help="updates per arm and seed")
    parser.add_argument("--questions-per-step", type=int, default=4)
    parser.add_argument("--heldout", type=int, default=100, help="test (and dev) questions")
    parser.add_argument("--out", type=Path, default=Path("bench/results/adversarial-chaining.json"))
    parser.add_argument("--cache-dir", type=Path, default=Path(".cache/advrag/bench-adversarial"))
    parser.add_argument("--records", type=Path, default=None,
                        help="the arms' committed records (default: --out without .json)")
    parser.add_argument("--arms", nargs="+", choices=tuple(ARMS), default=list(ARMS),
                        help="the arms to train in this run (the record and its test still "
                             "cover both): e.g. GAR's first, while its judge is at hand")
    parser.add_argument("--arm", choices=tuple(ARMS), default=None,
                        help="(child process) train this arm for the one seed of --seeds")
    args = parser.parse_args()
    for flag, path, fix in inputs_to_check(args):
        if not path.exists():
            parser.error(f"{flag}: {path} does not exist; `{fix}` builds it")
    offline_world()
    tracking.configure()
    records = ArmRecords(args.records or args.out.with_suffix(""))
    if args.arm:
        return train_one(args, records)
    names = [f"{arm}-seed{s}" for s in args.seeds for arm in ARMS]
    for name in to_train(names, args.arms, records):
        train_in_child(args, records, name)
        write_aggregate(args, records, names)  # a killed session keeps what finished
    write_aggregate(args, records, names)


if __name__ == "__main__":
    main()
