"""Prefect tasks of GAR's discriminator SFT: slice set, gate, fine-tune, evaluate, export, register."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from advrag.common import console
from advrag.common.fileio import atomic_write_text, whole_lines
from advrag.datasets.records import QARecord
from advrag.recipes.gar import DiscriminatorSFTConfig
from advrag.tasks import tracking

ADAPTER = "discriminator"


@task(cache_policy=NO_CACHE)
def load_discriminator(config: DiscriminatorSFTConfig, base: str) -> tuple:
    """``base`` with a fresh LoRA adapter named "discriminator": ``(AdapterPolicy, tokenizer)``."""
    from advrag.engines.local.dual import shared_lora_policies
    from advrag.engines.local.trainer import seed_everything
    from advrag.models.loading import load_policy

    seed_everything(config.seed)  # the adapter's initialisation draws random numbers
    loaded = load_policy(base, dtype="float32")
    policies = shared_lora_policies(loaded.model, config.lora, names=(ADAPTER,),
                                    cpu_bf16=config.cpu_bf16, amx_attention=config.amx_attention)
    return policies[ADAPTER], loaded.tokenizer


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=3)
def slice_set(config: DiscriminatorSFTConfig, policy, tokenizer,
              base: str) -> tuple[list[dict], list[QARecord], dict[str, float]]:
    """The labelled slice rows of the training questions, the dev/test records, and
    the judge's counts (``judge_counts``: slices, labelled, malformed by reason; {} if grounded).
    ``base`` is the start policy ``policy`` wraps (its rollouts' cache is named by it)."""
    from advrag.curation.demonstrations import build_demonstrations
    from advrag.curation.gar_data import build_slice_set, read_lexicon
    from advrag.curation.gar_llm_judge import judge_counts, make_slice_judge
    from advrag.datasets.loaders import load_qa
    from advrag.engines.local.generation import HFGenerator
    from advrag.engines.local.tokenize import token_counter
    from advrag.retrieval.retriever import load_retriever

    records = load_qa(config.world_dir / "train.jsonl")[:config.questions]
    retriever = load_retriever(config.index_dir, kind="dense")
    demos = build_demonstrations(records, retriever,
                                 HFGenerator(policy.model, tokenizer).chat_prompt,
                                 topk=config.topk, max_turns=config.max_turns)
    lexicon = read_lexicon(config.world_dir, records)
    judge = make_slice_judge(config.judge, lexicon)
    rows = build_slice_set(records, demos, lexicon, token_counter(tokenizer),
                           max_tokens=config.max_slice_tokens, seed=config.seed,
                           heldout_fraction=config.heldout_fraction, judge=judge,
                           rollouts=sampled_rollouts(config, policy, tokenizer, records, retriever,
                                                     rollout_cache(config, base)))
    heldout = [r for split in ("dev", "test") for r in load_qa(config.world_dir / f"{split}.jsonl")]
    return rows, heldout, judge_counts(judge)


def rollout_cache(config: DiscriminatorSFTConfig, base: str) -> Path:
    """Where the rollouts to label are kept as they come: named by the start policy's weights
    and every setting they depend on, so only the same rollouts are ever read back."""
    from advrag.curation.curate import policy_fingerprint
    from advrag.models.loading import resolve_model_dir

    settings = {"policy": policy_fingerprint(resolve_model_dir(base)),
                **config.model_dump(mode="json", include={
                    "rollouts", "rollout_max_new_tokens", "max_turns", "topk", "questions",
                    "world_dir", "index_dir"})}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    return config.checkpoint_dir / "rollouts" / f"{digest}.jsonl"


def kept_rows(cache: Path) -> list[dict]:
    """The whole rows of ``cache`` (none when it is not there); a last line a killed write
    left unfinished is cut off the file."""
    if not cache.is_file():
        cache.parent.mkdir(parents=True, exist_ok=True)
        return []
    whole = whole_lines(cache)
    if len(whole.encode("utf-8")) != cache.stat().st_size:
        atomic_write_text(cache, [whole])
    return [json.loads(line) for line in whole.splitlines()]


def sampled_rollouts(config: DiscriminatorSFTConfig, policy, tokenizer, records: list[QARecord],
                     retriever, cache: Path) -> list:
    """``config.rollouts`` Search-R1 rollouts of each record sampled from ``policy`` before its
    SFT (its adapter is still zero: the base, i.e. the start policy), temperature 1. Each batch
    is appended to ``cache`` as it finishes; a killed run reads them back and samples the rest."""
    from advrag.agents.search_loop import run_search_agent
    from advrag.agents.types import Trajectory
    from advrag.engines.local.dual import agent_generator

    if not config.rollouts:
        return []
    generator = agent_generator(policy, tokenizer, temperature=1.0, batch_size=32)
    questions = [r.question for r in records for _ in range(config.rollouts)]
    out = [Trajectory.from_json(row) for row in kept_rows(cache)]
    with console.progress("rollouts to label", len(questions), "rollouts", initial=len(out)) as bar, \
            open(cache, "a") as kept:
        for start in range(len(out), len(questions), 32):
            batch = run_search_agent(questions[start:start + 32], generator, retriever,
                                     max_turns=config.max_turns, topk=config.topk,
                                     max_new_tokens=config.rollout_max_new_tokens)
            kept.write("".join(json.dumps(t.to_json()) + "\n" for t in batch))
            kept.flush()
            out += batch
            bar.update(len(batch))
    return out


@task(cache_policy=NO_CACHE)
def given_slice_set(config: DiscriminatorSFTConfig) -> tuple[list[dict], Path]:
    """The slice set ``config.slices`` names, once it passes the GX gate ``write_and_gate``
    puts a new one through: its rows and path."""
    from advrag.curation.gates import DataGateError, validate_slice_file
    from advrag.datasets.loaders import load_qa
    from advrag.datasets.records import read_jsonl

    path = Path(config.slices)
    if not path.is_file():
        raise FileNotFoundError(f"slices: {path} does not exist; write one with `advrag "
                                "gar-slices`, or set slices: null to build the set")
    heldout = [r for split in ("dev", "test") for r in load_qa(config.world_dir / f"{split}.jsonl")]
    report = validate_slice_file(path, [r.to_json() for r in heldout])
    if not report.ok:
        raise DataGateError(f"slices: {path}\n{report.render()}")
    return read_jsonl(path), path


@task(cache_policy=NO_CACHE)
def write_and_gate(config: DiscriminatorSFTConfig, rows: list[dict],
                   heldout: list[QARecord]) -> Path:
    """``out_dir/slices.jsonl``, replaced only if the GX gate passes and both splits have rows."""
    from advrag.common.fileio import atomic_file
    from advrag.curation.gar_data import SPLITS
    from advrag.curation.gates import DataGateError, validate_slice_file
    from advrag.datasets.records import write_jsonl

    empty = [split for split in SPLITS if not any(r["split"] == split for r in rows)]
    if empty:
        raise ValueError(f"the slice set has no {' or '.join(empty)} rows: raise questions "
                         "(more questions give more sound and unsound slices)")
    path = config.out_dir / "slices.jsonl"
    with atomic_file(path) as tmp:
        write_jsonl(tmp, rows)
        report = validate_slice_file(tmp, [r.to_json() for r in heldout])
        if not report.ok:
            raise DataGateError(report.render())
    return path


def slice_set_version(path: Path) -> str:
    """SHA-256 of the slice file: the version DVC's stage output and the MLflow tag agree on."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@task(cache_policy=NO_CACHE)
def log_slice_set(run_id: str, path: Path, rows: list[dict], judged: dict[str, float]) -> None:
    """Rows per split, source and label, the judge's counts (``judge/...``: malformed replies by
    reason for an LLM judge), and the slice set itself, to the run."""
    from collections import Counter

    counts = Counter((r["split"], r["source"], "yes" if r["sound"] else "no") for r in rows)
    tracking.log_metrics(run_id, {f"slices/{split}/{source}/{label}": n
                                  for (split, source, label), n in counts.items()}
                         | {f"judge/{k}": v for k, v in judged.items()})
    tracking.client().log_artifact(run_id, str(path), artifact_path=f"slices/{path.parent.name}")


def _trajectories(rows: list[dict], chat_prompt, tokenizer,
                  config: DiscriminatorSFTConfig) -> tuple[list, int]:
    """Judge examples of ``rows``: each row's prompt (its passages within ``evidence_tokens``)
    and judgment cut at ``max_new_tokens`` (GAR's K), EOS included; and the passages the cap
    left out of them."""
    from advrag.curation.gar_data import judgment_trajectory, row_label, row_prompt
    from advrag.curation.gar_labels import sft_target
    from advrag.engines.local.tokenize import token_counter

    out, left_out, count = [], 0, token_counter(tokenizer)
    for row in rows:
        ids = tokenizer(sft_target(row_label(row)) + tokenizer.eos_token,
                        add_special_tokens=False).input_ids[:config.max_new_tokens]
        prompt = row_prompt(row, count, config.evidence_tokens)
        out.append(judgment_trajectory(prompt.text, chat_prompt, tokenizer.decode(ids)))
        left_out += prompt.left_out
    return out, left_out


def parted(config: DiscriminatorSFTConfig, rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The held-out slices parted by question into the dev ones (``dev_fraction``), which
    choose the epoch, and the measured ones, which ``evaluate`` scores."""
    from advrag.curation.gar_data import dev_and_measured

    return dev_and_measured(rows, config.dev_fraction, config.seed)


def verdict_auroc(policy, tokenizer, judgments: list, sound: list[bool]) -> float:
    """AUROC of P(yes) on judge examples (the dev ones, each epoch): the judge writes greedily
    up to its "Verdict:" (at most as many tokens as the example's target) and P(yes) is read
    there, as ``evaluate`` and GAR's RL step read it; a judgment that reaches no verdict counts
    0.5 (``judgment_metrics``' ``auroc_all``)."""
    from advrag.engines.local.dual import agent_generator
    from advrag.engines.local.verdicts import VERDICT, judgment_metrics

    prompts = [j.segments[0].text for j in judgments]
    limit = max(len(tokenizer(j.segments[1].text, add_special_tokens=False).input_ids)
                for j in judgments)
    generator = agent_generator(policy, tokenizer, temperature=0.0, batch_size=16)
    _, p_yes = judged(generator, policy, tokenizer, prompts, limit, stop=[VERDICT])
    return judgment_metrics(sound, [None] * len(sound), p_yes)["auroc_all"]


def judged(generator, policy, tokenizer, prompts: list[str], max_new_tokens: int,
           stop: list[str] | None = None, chunk: int = 64) -> tuple[list[str], list]:
    """Greedy judgments of ``prompts`` and P(yes) at each verdict, ``chunk`` prompts at a time
    under a progress bar (a held-out measure of a thousand slices takes many minutes); a
    multiple of the generator's batch size, so the batches are the ones of a single call."""
    from advrag.engines.local.verdicts import verdict_probabilities

    outputs, p_yes = [], []
    with console.progress("held-out judgments", len(prompts), "slices") as bar:
        for start in range(0, len(prompts), chunk):
            part = prompts[start:start + chunk]
            said = generator.generate(part, max_new_tokens=max_new_tokens, stop=stop or [])
            outputs += said
            p_yes += verdict_probabilities(policy, tokenizer, part, said)
            bar.update(len(part))
    return outputs, p_yes


@task(cache_policy=NO_CACHE)
def finetune(config: DiscriminatorSFTConfig, policy, tokenizer, rows: list[dict],
             run_id: str) -> dict[str, float]:
    """SFT with early stopping on the dev slices' AUROC (``verdict_auroc``: how well P(yes)
    ranks sound above unsound slices, what GAR's rewards read; the loss can fall while the
    verdicts stay at chance), run by the engine's ``early_stopped_finetune``; the best epoch's
    adapter is saved and kept. The dev slices are a part of the held-out questions' (``parted``)
    that ``evaluate`` does not score, so the epoch is not chosen on the slices it is scored on.

    Returns the best epoch (from 1), its dev AUROC and loss, the epochs run and the dev slices.
    The adapter goes to ``checkpoint_dir/adapter`` (atomically) whenever the
    dev AUROC improves, and is loaded back at the end. Each finished epoch is kept in
    ``checkpoint_dir/sft-progress`` until the SFT ends, so a killed run resumes after it.
    """
    from advrag.common.fileio import atomic_dir
    from advrag.engines.local.generation import HFGenerator
    from advrag.engines.local.sft import EarlyStopping, early_stopped_finetune
    from advrag.engines.local.tokenize import refuse_cut
    from advrag.engines.local.verdicts import judgment_loss

    chat = HFGenerator(policy.model, tokenizer).chat_prompt
    dev_rows, measured_rows = parted(config, rows)
    (train, train_left_out), (dev, dev_left_out), (measured, measured_left_out) = (
        _trajectories(part, chat, tokenizer, config)
        for part in ([r for r in rows if r["split"] == "train"], dev_rows, measured_rows))
    left_out, examples = train_left_out + dev_left_out + measured_left_out, len(train + dev + measured)
    tracking.log_metrics(run_id, {"sft/evidence_left_out": left_out,
                                  "sft/dev_slices": len(dev)})
    if left_out:
        print(f"evidence_tokens = {config.evidence_tokens} left {left_out} earlier passages out "
              f"of {examples} judge examples (counted as sft/evidence_left_out); raise it to "
              "show them")
    refuse_cut(dev + measured, tokenizer, config.sft.max_seq_len, "sft.max_seq_len",
               "held-out judge examples")  # the training ones: early_stopped_finetune's
    sound = [r["sound"] for r in dev_rows]
    adapter = config.checkpoint_dir / "adapter"

    def measure() -> dict[str, float]:
        return {"auroc": verdict_auroc(policy, tokenizer, dev, sound),
                "loss": judgment_loss(policy, tokenizer, dev, max_len=config.sft.max_seq_len,
                                      micro_batch_size=config.sft.micro_batch_size)}

    def save() -> None:
        with atomic_dir(adapter) as tmp:
            policy.save_weights(tmp)

    def logged(epoch: int, scores: dict[str, float]) -> None:
        tracking.log_metrics(run_id, {f"sft/dev_{k}": v for k, v in scores.items()},
                             step=epoch)
        print(f"epoch {epoch + 1}/{config.sft.epochs}: dev AUROC {scores['auroc']:.3f}, "
              f"loss {scores['loss']:.4f} ({len(dev)} dev slices)")

    progress = config.checkpoint_dir / "sft-progress"  # a killed run's epochs; gone once it ends
    stopping = EarlyStopping(measure, "auroc", config.patience, save,
                             lambda: policy.load_weights(adapter), logged, progress)
    result = early_stopped_finetune(
        policy, tokenizer, train, config.sft, stopping, setting="sft.max_seq_len",
        label="discriminator SFT", what="judge examples",
        on_step=lambda step, m: tracking.log_metrics(run_id, {f"sft/{k}": v for k, v in
                                                              m.items()}, step=step))
    shutil.rmtree(progress, ignore_errors=True)
    return result | {"dev_slices": float(len(dev))}


@task(cache_policy=NO_CACHE)
def evaluate(config: DiscriminatorSFTConfig, policy, tokenizer, rows: list[dict],
             run_id: str) -> dict[str, float]:
    """Greedy judgments (≤ K tokens) of the measured held-out slices (not the dev ones that
    chose the epoch): accuracy, F1, AUROC, malformed, over all of them and per source
    (``<source>/<metric>``: demonstration, corrupted, rollout)."""
    from advrag.curation.gar_data import row_prompt
    from advrag.curation.gar_labels import parse_verdict
    from advrag.engines.local.dual import agent_generator
    from advrag.engines.local.tokenize import token_counter
    from advrag.engines.local.verdicts import judgment_metrics

    _, held = parted(config, rows)
    generator = agent_generator(policy, tokenizer, temperature=0.0, batch_size=16)
    count = token_counter(tokenizer)
    prompts = [generator.chat_prompt(row_prompt(r, count, config.evidence_tokens).text)
               for r in held]
    outputs, p_yes = judged(generator, policy, tokenizer, prompts, config.max_new_tokens)
    verdicts = [parse_verdict(o) for o in outputs]
    metrics = judgment_metrics([r["sound"] for r in held], verdicts, p_yes) | {"n": len(held)}
    for source in sorted({r["source"] for r in held}):
        rows_of = [i for i, r in enumerate(held) if r["source"] == source]
        metrics |= {f"{source}/{k}": v for k, v in judgment_metrics(
            [held[i]["sound"] for i in rows_of], [verdicts[i] for i in rows_of],
            [p_yes[i] for i in rows_of]).items()} | {f"{source}/n": len(rows_of)}
    tracking.log_metrics(run_id, {f"heldout/{k}": v for k, v in metrics.items()})
    tracking.log_figure(run_id, confusion_figure([r["sound"] for r in held], verdicts),
                        "heldout/confusion.png")
    tracking.log_table(run_id, [{"id": r["id"], "slice": r["slice"], "sound": r["sound"],
                                 "verdict": v, "p_yes": p, "output": o}
                                for r, v, p, o in zip(held, verdicts, p_yes, outputs)],
                       "heldout/judgments.json")
    return metrics


def confusion_figure(sound: list[bool], verdicts: list[bool | None]):
    """Counts of the judge's verdict (yes, no, malformed) per true label (yes, no)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    said = ["malformed" if v is None else "yes" if v else "no" for v in verdicts]
    columns, labels = ["yes", "no", "malformed"], ["yes", "no"]
    counts = [[sum(s == (t == "yes") and p == c for s, p in zip(sound, said)) for c in columns]
              for t in labels]
    fig, ax = plt.subplots(figsize=(4.5, 3))
    ax.imshow(counts, cmap="Blues")
    for i, row in enumerate(counts):
        for j, n in enumerate(row):
            ax.text(j, i, str(n), ha="center", va="center")
    ax.set(xticks=range(3), xticklabels=columns, yticks=range(2), yticklabels=labels,
           xlabel="verdict", ylabel="judge's label", title=f"held-out slices (n={len(sound)})")
    fig.tight_layout()
    return fig


@task(cache_policy=NO_CACHE)
def export(config: DiscriminatorSFTConfig, policy, tokenizer) -> Path:
    """The adapter merged into a copy of the base, as a plain checkpoint in ``checkpoint_dir/model``."""
    from advrag.engines.local.dual import export_policy

    return export_policy(policy, tokenizer, config.checkpoint_dir / "model")


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=3)
def register(config: DiscriminatorSFTConfig, run_id: str, adapter_dir: Path, model_dir: Path,
             tags: dict[str, str]) -> str:
    """Log the adapter and register the merged model as ``registered_model``; its version."""
    tracking.log_artifacts(run_id, adapter_dir, ADAPTER)
    return tracking.register_model_dir(run_id, model_dir, config.registered_model,
                                       tags={**tags, "run_id": run_id,
                                             "git.commit": tracking.git_commit()})
