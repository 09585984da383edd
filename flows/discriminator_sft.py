"""Flow `discriminator-sft`: GAR's discriminator SFT (§3, §4.1) on judge-labelled slices.

grounded demonstrations of the training questions + corrupted copies → slices
(or the set ``slices:`` names, gated again) labelled by the configured judge (``judge:`` grounded, or an LLM behind an
OpenAI-compatible server whose malformed judgments are counted and dropped),
balanced 1:1, split by question → GX gate
(atomic write) → LoRA SFT of the adapter "discriminator" with early stopping on
the AUROC of P(yes) on the dev slices (a third of the held-out questions') → accuracy, F1,
AUROC of P(yes), malformed count on the other held-out slices →
the adapter (for ``AdapterPolicy.load_weights``) and the merged model,
registered. Runs on its own (`advrag discriminator-sft`) and as the pipeline's
stage, nested under its run. The slice set alone is the flow `gar-slices`
(`advrag gar-slices`, the DVC stage of the same name); the SFT run carries its
content hash as the tag ``data.slices.version``.
"""

from __future__ import annotations

from prefect import flow

from advrag.common.locks import exclusive
from advrag.config import config_hash
from advrag.evaluation.reports import auroc_text
from advrag.recipes.gar import DiscriminatorSFTConfig
from advrag.tasks import data, tracking
from advrag.tasks import discriminator as steps


@flow(name="discriminator-sft", log_prints=True)
def discriminator_sft(config: DiscriminatorSFTConfig, base: str | None = None,
                      parent: str | None = None) -> dict:
    """SFT the discriminator adapter on ``base`` (default ``config.model``).

    ``parent``: a run of ``config.experiment`` to nest under. Returns the run id,
    the adapter and model directories, the registered version and the
    held-out metrics (``accuracy``, ``f1``, ``auroc``, ``malformed``, ``n``).
    """
    base = base or config.model
    if parent is None:
        tracking.configure()
    digest = data.data_version()["digest"]
    params = {"config": config.model_dump(mode="json"), "base": base, "data": digest}
    tags = {"flow": "discriminator-sft", "data.version": digest, "model": base}
    with exclusive(config.checkpoint_dir, "the discriminator's checkpoint directory"), \
            tracking.tracked_run(config.experiment, "discriminator-sft", params=params,
                                 tags=tags, parent=parent) as run_id:
        policy, tokenizer = steps.load_discriminator(config, base)
        if config.slices is None:
            rows, heldout, judged = steps.slice_set(config, policy, tokenizer, base)
            path = steps.write_and_gate(config, rows, heldout)
        else:  # a set written before (its judge's counts were logged with it)
            (rows, path), judged = steps.given_slice_set(config), {}
        slices_version = steps.slice_set_version(path)
        tracking.set_tags(run_id, {"data.slices.version": slices_version})
        steps.log_slice_set(run_id, path, rows, judged)
        training = steps.finetune(config, policy, tokenizer, rows, run_id)
        metrics = steps.evaluate(config, policy, tokenizer, rows, run_id)
        model_dir = steps.export(config, policy, tokenizer)
        adapter_dir = config.checkpoint_dir / "adapter"
        provenance = {"data.version": digest, "data.slices.version": slices_version,
                      "config.hash": config_hash(config), "base": base,
                      **{f"heldout.{k}": f"{v:.4f}" for k, v in metrics.items()}}
        version = steps.register(config, run_id, adapter_dir, model_dir, provenance)
    print(f"discriminator: {len(rows)} slices, best epoch {training['best_epoch']:.0f} (by "
          f"AUROC on {training['dev_slices']:.0f} dev slices); on {metrics['n']:.0f} other "
          f"held-out slices "
          f"accuracy {metrics['accuracy']:.3f}, F1 {metrics['f1']:.3f}, "
          f"AUROC {auroc_text(metrics['auroc'])} ({auroc_text(metrics['auroc_all'])} over every "
          "slice, one with no verdict at 0.5), "
          f"{metrics['malformed']:.0f} malformed → {config.registered_model} v{version}")
    return {"run_id": run_id, "adapter_dir": str(adapter_dir), "model_dir": str(model_dir),
            "version": version, "slices": str(path), "slices_version": slices_version,
            "metrics": metrics, "training": training}


@flow(name="gar-slices", log_prints=True)
def gar_slices(config: DiscriminatorSFTConfig, base: str | None = None) -> dict:
    """The discriminator's slice set alone, exactly as ``discriminator_sft`` writes it (same
    tasks, same base): ``out_dir/slices.jsonl`` behind its GX gate; its path and version."""
    base = base or config.model
    policy, tokenizer = steps.load_discriminator(config, base)
    rows, heldout, judged = steps.slice_set(config, policy, tokenizer, base)
    path = steps.write_and_gate(config, rows, heldout)
    version = steps.slice_set_version(path)
    print(f"{len(rows)} slices → {path} (version {version[:12]})", judged or "")
    return {"slices": str(path), "slices_version": version, "rows": len(rows), "judge": judged}
