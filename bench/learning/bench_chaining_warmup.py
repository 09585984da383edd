"""A warm-up that chains: SFT on demonstrations that state their plan, scored per question kind.

    python bench/learning/bench_chaining_warmup.py --variant lora|full [--demonstrations 256]
        [--every-three-hop] [--epochs 2] [--split dev] [--limit 100] [--rejection 4]
        [--rejection-questions 200] [--score last] [--out FILE]

The protocol is declared in docs/chaining-experiments.md before any run. Each stage writes
under ``.cache/advrag/chaining/<variant>/`` and is skipped when its output is there, so a killed
run resumes at the stage it was in (an epoch restarts from the epoch before it):

1. SFT, one epoch at a time: epoch e starts from epoch e−1's merged model (the base for the
   first), on the world's training questions' grounded demonstrations (``--demonstrations``,
   the plan-stating thoughts of ``curation.demonstrations``; with ``--every-three-hop`` also
   every other usable three-hop training question's), in epoch e's seeded order; LoRA
   (r 16, lr 2e-4: a fresh adapter each epoch, merged after it) or full fine-tuning (lr 2e-5).
2. With ``--rejection K``: K sampled rollouts (temperature 1) of each of the first
   ``--rejection-questions`` chained training questions by the last epoch's model; the correct
   ones (EM 1, no format error, kept in ``rs<K>-kept.json``) are fine-tuned on for one more
   epoch (rejection sampling).
3. Each snapshot (the base, every epoch, the rejection round; with ``--score last`` only the
   last one: the protocol scores the chosen snapshot alone on test; with ``--score none``
   nothing, to rebuild a start policy in a fresh session) benchmarked on ``--split``
   with the Search-R1 agent (4 turns, 128 new tokens, greedy): EM/F1 per question kind with
   bootstrap intervals, format errors, searches, hop recall, chaining rate, turns cut.

Writes ``bench/results/chaining_warmup-<variant>[-3hop][-rs<K>]-<split>.json``, or ``--out``
(a snapshot retrained on another machine is scored into its own record, beside the one it was
chosen by).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from advrag.common import console
from advrag.config import BenchmarkConfig, load_config
from advrag.core.metrics import exact_match
from advrag.datasets.loaders import load_qa
from advrag.datasets.records import question_kind
from advrag.recipes.base import trainable_policy
from advrag.recipes.grpo import GrpoConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from arm_records import read_text, write_text
from inputs import offline_world
from reporting import write_report

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {"lora": {"lora": {"r": 16, "alpha": 32}, "lr": 2e-4},
            "full": {"lora": None, "lr": 2e-5}}
"""The fine-tuning variants the protocol compares (LoRA's lr is the warm-ups'; full
fine-tuning's a tenth of it, as full updates move every weight)."""
KINDS = ("single", "two-hop", "three-hop", "comparison")
MEASURES = ("n", "em", "f1", "format_errors", "n_searches", "hop_recall", "chaining_rate",
            "cut_turns")


def run_config(variant: str, epochs: int) -> GrpoConfig:
    """``configs/train.yaml``'s budgets and world with the variant's fine-tuning settings."""
    config = load_config(ROOT / "configs/train.yaml", GrpoConfig)
    settings = VARIANTS[variant]
    sft = config.warmup.sft.model_copy(update={"lr": settings["lr"], "epochs": epochs})
    return config.model_copy(update={
        "lora": None if settings["lora"] is None else config.lora,
        "warmup": config.warmup.model_copy(update={"sft": sft})})


def finetune_once(config: GrpoConfig, start: str, demos, epoch: int, out: Path) -> Path:
    """One SFT epoch from ``start`` on ``demos`` (epoch ``epoch``'s order), merged into ``out``."""
    from advrag.engines.local.dual import export_policy
    from advrag.engines.local.sft import supervised_finetune
    from advrag.engines.local.trainer import seed_everything

    sft = config.warmup.sft.model_copy(update={"epochs": 1, "seed": config.warmup.sft.seed + epoch})
    settings = {"start": start, "epoch": epoch, "demonstrations": len(demos),
                "lora": config.lora is not None, "lr": sft.lr}
    if (out / "done.json").is_file():
        made = json.loads((out / "done.json").read_text())
        if {k: made.get(k) for k in settings} != settings:
            raise SystemExit(f"{out} was made with other settings ({made}): delete it or keep "
                             f"the settings it was made with ({settings} asked)")
        return out
    seed_everything(sft.seed)
    policy, tokenizer = trainable_policy(start, config, keep_reference=False,
                                         sequences=len(demos))
    started = time.perf_counter()
    history = supervised_finetune(policy, tokenizer, demos, sft)
    export_policy(policy, tokenizer, out, files={"done.json": json.dumps(settings | {
        "seconds": time.perf_counter() - started,
        "loss": [round(h["loss"], 4) for h in history]}, indent=1)})
    return out


def demonstrations(config: GrpoConfig, limit: int, every_three_hop: bool = False) -> list:
    """The grounded, plan-stating demonstrations of the first ``limit`` usable questions, and
    with ``every_three_hop`` every later three-search one too (the world's deepest chains are
    a sixth of its questions: more of them is the declared three-hop follow-up)."""
    from advrag.curation.demonstrations import build_demonstrations
    from advrag.engines.local.generation import ChatPrompting
    from advrag.models.loading import load_tokenizer
    from advrag.retrieval.retriever import load_retriever

    demos = build_demonstrations(
        load_qa(config.world_dir / "train.jsonl"), load_retriever(config.index_dir),
        ChatPrompting(load_tokenizer(config.model)).chat_prompt, topk=config.topk,
        max_turns=config.max_turns)
    later = [d for d in demos[limit:] if d.n_searches == 3] if every_three_hop else []
    return demos[:limit] + later


def rejection_samples(config: GrpoConfig, model: str, k: int, questions: int,
                      out: Path) -> list:
    """The correct rollouts (EM 1, no format error) of ``k`` samples of each of the first
    ``questions`` chained training questions, kept in ``out`` (gzipped JSON when it ends in
    ``.gz``; read back when there, so a killed run, or a later session given the committed
    set, does not sample again)."""
    from advrag.agents.search_loop import run_search_agent
    from advrag.agents.types import Segment, Trajectory
    from advrag.engines.local.generation import HFGenerator
    from advrag.models.loading import load_policy
    from advrag.retrieval.retriever import load_retriever

    if out.is_file():
        return [Trajectory(segments=[Segment(s["text"], s["source"]) for s in t])
                for t in json.loads(read_text(out))]
    chained = [r for r in load_qa(config.world_dir / "train.jsonl")
               if question_kind(r) in ("two-hop", "three-hop")][:questions]
    policy = load_policy(model)
    generator = HFGenerator(policy.model, policy.tokenizer, temperature=1.0, batch_size=32)
    retriever, kept = load_retriever(config.index_dir), []
    with console.progress("rejection sampling", len(chained) * k, "rollouts") as bar:
        for start in range(0, len(chained), 8):
            batch = [r for r in chained[start:start + 8] for _ in range(k)]
            trajs = run_search_agent([r.question for r in batch], generator, retriever,
                                     max_turns=config.max_turns, topk=config.topk,
                                     max_new_tokens=config.max_new_tokens)
            kept += [t for t, r in zip(trajs, batch, strict=True)
                     if exact_match(t.answer, r.golden_answers) and t.format_errors == 0]
            bar.set_postfix(kept=len(kept), refresh=False)
            bar.update(len(batch))
    print(f"rejection sampling: kept {len(kept)} of {len(chained) * k} rollouts", flush=True)
    write_text(out, json.dumps([[{"text": s.text, "source": s.source} for s in t.segments]
                                for t in kept]))
    return kept


def scored(model: str, config: GrpoConfig, split: str, limit: int, out: Path) -> dict:
    """The benchmark of ``model`` on ``split`` (cached in ``out``): measures overall and per kind."""
    from advrag.flows.benchmark import benchmark

    if out.is_file():
        return json.loads(out.read_text())
    settings = config.evaluate.model_copy(update={
        "model": model, "methods": ["search_r1"], "split": split, "limit": limit,
        "experiment": "advrag-bench-chaining-warmup"})
    summary = benchmark(BenchmarkConfig(**settings.model_dump()),
                        run_name=Path(model).name)["results"][("search_r1", "world")]
    result = {"all": {k: summary.get(k) for k in MEASURES},
              **{kind: {k: summary.get(f"kind/{kind}/{k}") for k in MEASURES} for kind in KINDS}}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=sorted(VARIANTS), required=True)
    parser.add_argument("--demonstrations", type=int, default=256)
    parser.add_argument("--every-three-hop", action="store_true",
                        help="add every later three-search demonstration (the follow-up)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--split", default="dev", choices=["dev", "test"])
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--rejection", type=int, default=0, help="K samples a question; 0: none")
    parser.add_argument("--rejection-questions", type=int, default=200)
    parser.add_argument("--kept", type=Path, default=None,
                        help="the rejection round's kept rollouts: read when there (a committed "
                        "set: no sampling), else sampled and written there")
    parser.add_argument("--score", choices=["all", "last", "none"], default="all",
                        help="benchmark every snapshot, the last one only, or none (rebuild)")
    parser.add_argument("--out", type=Path, default=None, help="the record to write "
                        "(default bench/results/chaining_warmup-<arm>-<split>.json)")
    args = parser.parse_args()
    offline_world()
    config = run_config(args.variant, args.epochs)
    arm = args.variant + ("-3hop" if args.every_three_hop else "")
    work = ROOT / ".cache/advrag/chaining" / arm
    demos = demonstrations(config, args.demonstrations, args.every_three_hop)
    snapshots, model, extra = {"base": config.model}, config.model, {}
    for epoch in range(args.epochs):
        model = str(finetune_once(config, model, demos, epoch, work / f"epoch-{epoch + 1}"))
        snapshots[f"epoch {epoch + 1}"] = model
    if args.rejection:
        kept = rejection_samples(config, model, args.rejection, args.rejection_questions,
                                 args.kept or work / f"rs{args.rejection}-kept.json")
        extra["rejection_kept"] = len(kept)
        snapshots[f"rejection round (k {args.rejection})"] = str(finetune_once(
            config, model, kept, args.epochs, work / f"rs{args.rejection}"))
    if args.score == "none":
        print(f"built {[*snapshots.values()][-1]}; not scored (--score none)")
        return
    if args.score == "last":
        snapshots = dict([*snapshots.items()][-1:])
    results = {name: scored(path, config, args.split, args.limit,
                            (work.parent if name == "base" else Path(path))
                            / f"eval-{args.split}-{args.limit}.json")
               for name, path in snapshots.items()}
    suffix = f"-rs{args.rejection}" if args.rejection else ""
    command = (f"python bench/learning/bench_chaining_warmup.py --variant {args.variant} "
               f"--demonstrations {args.demonstrations}"
               + (" --every-three-hop" if args.every_three_hop else "")
               + f" --epochs {args.epochs} --split "
               f"{args.split} --limit {args.limit}"
               + (f" --rejection {args.rejection} --rejection-questions "
                  f"{args.rejection_questions}" if args.rejection else "")
               + (f" --kept {args.kept}" if args.kept else "")
               + (" --score last" if args.score == "last" else "")
               + (f" --out {args.out}" if args.out else ""))
    out = args.out or ROOT / f"bench/results/chaining_warmup-{arm}{suffix}-{args.split}.json"
    write_report(out,
                 {"command": command, "demonstrations": len(demos), **extra, "snapshots": results,
                  "sft": {name: json.loads((Path(p) / "done.json").read_text())
                          for name, p in snapshots.items() if name != "base"}})


if __name__ == "__main__":
    main()
