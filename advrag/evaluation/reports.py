"""What people look at: the results table and bar plot, and the training curves.

Pure of tracking: tasks log the figures these return.
"""

from __future__ import annotations

import math

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def results_markdown(results: dict[tuple[str, str], dict[str, float]]) -> str:
    """Markdown table: one row per (method, dataset) with EM/F1 and their CIs."""
    lines = [
        "| method | dataset | n | EM | EM 95% CI | F1 | F1 95% CI | sub-EM | recall | searches |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (method, dataset), s in results.items():
        lines.append(
            f"| {method} | {dataset} | {int(s['n'])} | {s['em']:.3f} | "
            f"[{s['em_lo']:.3f}, {s['em_hi']:.3f}] | {s['f1']:.3f} | "
            f"[{s['f1_lo']:.3f}, {s['f1_hi']:.3f}] | {s['sub_em']:.3f} | "
            f"{s['retrieval_recall']:.3f} | {s['n_searches']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def results_figure(results: dict[tuple[str, str], dict[str, float]]):
    """Grouped bars of EM and F1 per method (one panel per dataset), CI error bars."""
    plt = _pyplot()
    datasets = sorted({d for _, d in results})
    fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 3.6), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        methods = [m for m, d in results if d == dataset]
        x = np.arange(len(methods))
        for offset, key in ((-0.2, "em"), (0.2, "f1")):
            stats = [results[(m, dataset)] for m in methods]
            means = np.array([s[key] for s in stats])
            err = np.array([[m - s[f"{key}_lo"] for m, s in zip(means, stats)],
                            [s[f"{key}_hi"] - m for m, s in zip(means, stats)]])
            bars = ax.bar(x + offset, means, 0.4, yerr=err, capsize=3, label=key.upper())
            ax.bar_label(bars, fmt="%.3f", fontsize=7, padding=2)
        top = max(results[(m, dataset)][f"{k}_hi"] for m in methods for k in ("em", "f1"))
        ax.set_xticks(x, methods)
        ax.set_ylim(0, min(1.0, max(0.1, 1.25 * top)))  # small scores stay readable
        ax.set_title(dataset)
        ax.legend()
    fig.tight_layout()
    return fig


def reward_curve(history: list[dict[str, float]]):
    """Mean reward (± std) per step: the plot a user looks at first."""
    plt = _pyplot()
    steps = [h["step"] for h in history]
    mean = [h["reward_mean"] for h in history]
    std = [h["reward_std"] for h in history]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, mean, marker="o", label="reward mean")
    ax.fill_between(
        steps,
        [m - s for m, s in zip(mean, std)],
        [m + s for m, s in zip(mean, std)],
        alpha=0.2,
        label="± std",
    )
    ax.set_xlabel("update")
    ax.set_ylabel("reward")
    ax.legend()
    fig.tight_layout()
    return fig


def training_by_type(history: list[dict[str, float]], window: int = 5):
    """Answer F1 and searches per question over training, one line per question type.

    A step trains on a few questions, so each type appears in some steps only: each point is
    the mean of that type's last ``window`` appearances (``type/<kind>/f1`` and
    ``type/<kind>/searches`` of the step metrics).
    """
    plt = _pyplot()
    kinds = sorted({key.split("/")[1] for h in history for key in h if key.startswith("type/")})
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, measure, label in ((axes[0], "f1", "answer F1"), (axes[1], "searches",
                                                             "searches per question")):
        for kind in kinds:
            points = [(h["step"], h[f"type/{kind}/{measure}"]) for h in history
                      if f"type/{kind}/{measure}" in h]
            values = [v for _, v in points]
            recent = [values[max(0, i - window + 1):i + 1] for i in range(len(values))]
            ax.plot([step for step, _ in points], [sum(r) / len(r) for r in recent],
                    marker=".", label=kind)
        ax.set_xlabel("update")
        ax.set_ylabel(f"{label} (last {window} of the type)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def reward_curves(history: list[dict[str, float]]):
    """Each agent's mean reward and F1 per step."""
    plt = _pyplot()
    steps = [h["step"] for h in history]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for agent in ("reasoner", "verifier"):
        line = ax.plot(steps, [h[f"{agent}/reward_mean"] for h in history], marker="o",
                       label=f"{agent} reward")[0]
        ax.plot(steps, [h[f"{agent}/f1"] for h in history], ls="--", color=line.get_color(),
                label=f"{agent} F1")
    ax.set_xlabel("update")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _turn_means(curves: list[dict[int, float]]) -> dict[int, float]:
    """Mean over dialogues of each turn's value (dialogues without that turn are skipped)."""
    values: dict[int, list[float]] = {}
    for curve in curves:
        for turn, value in curve.items():
            values.setdefault(turn, []).append(value)
    return {turn: sum(v) / len(v) for turn, v in sorted(values.items())}


def entropy_figure(traces_per_step: list[list]):
    """ARR Figure 6: per-turn mean entropy of reasoner think and verifier response.

    Lines split dialogues by correct/incorrect final answer (EM) and the run into
    its first and second half, to show how the trend evolves with training.
    """
    plt = _pyplot()
    half = (len(traces_per_step) + 1) // 2
    phases = {"early": traces_per_step[:half], "late": traces_per_step[half:]}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (attr, title) in zip(axes, (("think", "Reasoner <think>"),
                                        ("response", "Verifier <response>"))):
        for phase, steps in phases.items():
            traces = [t for step in steps for t in step]
            for correct in (True, False):
                curve = _turn_means([getattr(t, attr) for t in traces if t.correct == correct])
                if curve:
                    ax.plot([k + 1 for k in curve], list(curve.values()), marker="o",
                            ls="-" if correct else "--",
                            label=f"{phase}, {'correct' if correct else 'incorrect'}")
        ax.set_title(title)
        ax.set_xlabel("turn")
        ax.set_ylabel("mean token entropy")
        if ax.lines:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no such actions sampled", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig


def difficulty_histogram(scores: list[float], thresholds: dict[str, float],
                         counts: dict[str, int]):
    """UR²'s difficulty scores: a histogram, the level thresholds and the questions per level."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(scores, bins=np.linspace(0, 1, 21), color="tab:blue", alpha=0.8)
    top = ax.get_ylim()[1]
    for level, low in thresholds.items():
        ax.axvline(low, color="tab:red", linestyle="--", linewidth=1)
        ax.text(low, top * 0.85, f" {level}\n n={counts[level]}", fontsize=8)
    ax.set_xlabel("score s (mean answer metric over k rollouts)")
    ax.set_ylabel("questions")
    ax.set_title(f"difficulty of {len(scores)} questions ({counts['filtered']} filtered, s < "
                 f"{thresholds['hard']})")
    fig.tight_layout()
    return fig


GAR_PANELS = (
    ("reasoner", (("reasoner/reward_mean", "reward"), ("reasoner/answer_score", "R_m (answer)"),
                  ("reasoner/slice_score", "R_s (slices)"))),
    ("discriminator", (("discriminator/R_d", "R_d (GAN term)"),
                       ("discriminator/R_a", "R_a (alignment)"))),
    ("judge", (("discriminator/score_reference", "P(yes) reference slices"),
               ("discriminator/score_generated", "P(yes) generated slices"),
               ("discriminator/accuracy", "accuracy (balanced)"))),
)
"""gar_curves' panels: title, then (metric, legend label) per curve."""


def gar_curves(history: list[dict[str, float]]):
    """GAR per update: the reasoner's reward terms (R_m, R_s), the discriminator's (R_d, R_a),
    and the judge's scores and accuracy; a curve the run never logged is left out."""
    plt = _pyplot()
    steps = [h["step"] for h in history]
    fig, axes = plt.subplots(1, len(GAR_PANELS), figsize=(14, 3.5))
    for ax, (title, curves) in zip(axes, GAR_PANELS):
        for key, label in curves:
            if all(key in h for h in history):
                ax.plot(steps, [h[key] for h in history], marker="o", label=label)
        ax.set(xlabel="update", title=title)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def slice_score_histograms(slice_log: list[dict]):
    """The discriminator's P(yes) on reference vs generated slices, one panel for the first and
    one for the last logged update (GAR: a judge that learns pushes them apart).

    ``slice_log``: per update ``{"step", "reference": [p, ...], "generated": [p, ...]}``.
    """
    if not slice_log:
        raise ValueError("no slice scores to plot: run at least one judged update first")
    plt = _pyplot()
    shown = [slice_log[0]] if len(slice_log) == 1 else [slice_log[0], slice_log[-1]]
    fig, axes = plt.subplots(1, len(shown), figsize=(5 * len(shown), 3.2), squeeze=False)
    bins = np.linspace(0, 1, 21)
    for ax, entry in zip(axes[0], shown):
        for kind, color in (("reference", "tab:green"), ("generated", "tab:red")):
            ax.hist(entry[kind], bins=bins, alpha=0.6, color=color,
                    label=f"{kind} ({len(entry[kind])})")
        ax.set_title(f"update {entry['step']}", loc="left", fontsize=9)
        ax.set_xlabel("P(yes) at the verdict")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("slices")
    fig.tight_layout()
    return fig


JUDGED_TEXT_CHARS = 240  # slice and rationale characters shown per panel (longer ones end in "…")


def judged_slices_figure(judgments: list[dict]):
    """A few judged slices, one panel each: where the slice came from, P(yes), verdict, rationale.

    ``judgments``: dicts with ``source`` ("reference" or "generated"), ``question``,
    ``slice``, ``p_yes`` (None: unreadable), ``verdict`` (True/False/None: malformed),
    ``rationale`` and, for generated slices, ``correct`` (the rollout's answer).
    """
    import textwrap

    if not judgments:
        raise ValueError("no judged slices to plot: judge at least one slice first")
    plt = _pyplot()

    def block(label: str, text: str) -> str:
        shown = "".join(c if c.isprintable() else " " for c in text)  # no control glyphs
        short = textwrap.shorten(" ".join(shown.split()) or "(empty)", JUDGED_TEXT_CHARS,
                                 placeholder=" …")
        return textwrap.fill(f"{label}: {short}", width=110, subsequent_indent="    ")

    fig, axes = plt.subplots(len(judgments), 1, figsize=(11, 2.6 * len(judgments)), squeeze=False)
    for ax, j in zip(axes[:, 0], judgments):
        verdict = {True: "yes", False: "no", None: "malformed"}[j["verdict"]]
        p = "n/a" if j["p_yes"] is None else f"{j['p_yes']:.2f}"
        origin = "reference slice" if j["source"] == "reference" else (
            f"generated slice (rollout answer {'correct' if j.get('correct') else 'wrong'})")
        ax.axis("off")
        ax.set_title(f"{origin} — P(yes) {p}, verdict {verdict}", loc="left", fontsize=10,
                     color={"yes": "tab:green", "no": "tab:red"}.get(verdict, "tab:gray"))
        body = "\n".join(block(k, j[f]) for k, f in (("question", "question"), ("slice", "slice"),
                                                      ("rationale", "rationale")))
        ax.text(0, 1, body, va="top", ha="left", fontsize=8, family="monospace",
                transform=ax.transAxes)
    fig.tight_layout()
    return fig


def auroc_text(auroc: float) -> str:
    """An AUROC to three decimals, or why there is none (NaN: one label among the scored)."""
    return "n/a (the slices with a P(yes) hold one label)" if math.isnan(auroc) else f"{auroc:.3f}"


def reward_text(rewards: dict[str, list[float]]) -> str:
    """The RL stage's reward terms per update as one line: the value of a single update, else
    first → last (mean); empty when the run made no update (a finished stage resumed)."""
    n = max((len(v) for v in rewards.values()), default=0)
    if n == 0:
        return ""
    if n == 1:
        terms = ", ".join(f"{name} {v[0]:.3f}" for name, v in rewards.items() if v)
        return f"Joint RL rewards, 1 update: {terms}."
    terms = ", ".join(f"{name} {v[0]:.3f} → {v[-1]:.3f} ({sum(v) / len(v):.3f})"
                      for name, v in rewards.items() if v)
    return f"Joint RL rewards over {n} updates, first → last (mean): {terms}."


def changed_text(trained: dict) -> list[str]:
    """A line per benchmark saying how many greedy answers RL changed from the warm-up's (a
    trained row equal to the warm-up's then says why: it answers every question the same), and
    how far RL moved the weights (``weight_change``, relative to the warm-up's): why so few."""
    lines = []
    for key, n in trained.get("changed_answers", {}).items():
        total = trained["trained"][key]["n"]
        steps = trained.get("steps_run", 0)
        lines += ["", f"RL ({steps:.0f} update{'s' * (steps != 1)}) changed {n} of the "
                      f"{total:.0f} greedy answers ({key}) from the warm-up's"
                      + (": the trained row repeats the warm-up's." if n == 0 else ".")]
    if lines and "weight_change" in trained:
        lines[-1] += (f" RL moved the trained model's weights by {100 * trained['weight_change']:.2g} %"
                      " of the warm-up's (‖Δ‖ / ‖W‖).")
    return lines


def pipeline_markdown(trained: dict, judge: dict | None, decision: dict) -> str:
    """The pipeline's result: the reasoner per stage on held-out questions, the judge, the decision.

    ``trained``: the RL stage's result (``base``/``warmup``/``trained`` → ``method/dataset`` →
    summary); ``judge``: the discriminator SFT's result (its held-out ``metrics``) or None;
    ``decision``: the promotion gate's alias and tags. The RL stage's reward terms per update
    (``trained["rewards"]``, e.g. GAR's R_m, R_s, R_d, R_a) follow the table.
    """
    lines = ["| reasoner | questions | EM [95% CI] | F1 [95% CI] | format errors | searches "
             "| turns cut by max_new_tokens |", "|---|---|---|---|---|---|---|"]
    for stage in ("base", "warmup", "trained"):
        for key, s in trained.get(stage, {}).items():
            lines.append(f"| {stage} ({key}) | {s['n']:.0f} | {s['em']:.3f} [{s['em_lo']:.3f}, "
                         f"{s['em_hi']:.3f}] | {s['f1']:.3f} [{s['f1_lo']:.3f}, {s['f1_hi']:.3f}] "
                         f"| {s['format_errors']:.2f} | {s['n_searches']:.2f} "
                         f"| {s.get('cut_turns', 0.0):.2f} |")
    lines += changed_text(trained)
    rewards = reward_text(trained.get("rewards", {}))
    if rewards:
        lines += ["", rewards]
    if judge is not None:
        m = judge["metrics"]
        lines += ["", f"Discriminator on its held-out slices ({m.get('n', '?')}): written "
                  f"verdicts (what GAR's slice reward reads) accuracy {m['accuracy']:.3f}, F1 "
                  f"{m['f1']:.3f}, {m.get('malformed', 0):.0f} malformed; P(yes) at its verdict "
                  f"(what R_d reads) accuracy {m.get('p_yes_accuracy', math.nan):.3f}, "
                  f"AUROC {auroc_text(m['auroc'])}"
                  + (f" ({auroc_text(m['auroc_all'])} over every slice, one with no verdict "
                     "at 0.5)." if "auroc_all" in m else ".")]
    lines += ["", f"Registry: v{decision['version']} → {decision['alias']} — "
              f"{decision.get('promotion.reason', '')}"]
    return "\n".join(lines)
