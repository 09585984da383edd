"""The docs' result tables, generated from ``bench/results/*.json``: one source for every number.

A docs page asks for a table with a marker, ``<!-- results: FILE.json -->`` (or
``<!-- results: FILE.json VIEW -->`` for another view of the same file); the mkdocs hook
``on_page_markdown`` (``hooks:`` in ``mkdocs.yml``) replaces it with the table and a line
naming the file and the machine it was measured on, at every build. A marker whose file is
missing, or whose kind has no table here, fails the build. ``python bench/results_tables.py
FILE...`` prints the tables of results files, to see one before writing its marker. The README,
plain Markdown that nothing builds, holds generated blocks instead (the marker, the table, then
``<!-- /results -->``): ``--readme`` makes them again, and a test fails when one is stale.

Over DESIGN.md's 800 lines on purpose, for now: it is the mkdocs hook, loaded by path, so its
tables cannot yet live in sibling modules without the hook importing them by path too; each
table is one small function, found through ``TABLES``. The split is planned.

A file's kind is its name up to the first ``-`` (``update-amx.json`` is an ``update``), except
the UR² reports, told apart by their keys. Each kind has one function below that turns a report
into a header and rows; derived columns (ratios, shares) are computed here from the measured
values, not copied from the file.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
MARKER = re.compile(r"<!--\s*results:\s*(?P<file>[\w.\-]+\.json)(?:\s+(?P<view>\w+))?\s*-->")
END = "<!-- /results -->"
BLOCK = re.compile(r"(?P<marker><!--\s*results:\s*(?P<file>[\w.\-]+\.json)(?:\s+(?P<view>\w+))?"
                   r"\s*-->)\n.*?" + re.escape(END), re.S)
README = Path(__file__).resolve().parents[1] / "README.md"
Table = tuple[list[str], list[list[str]]]

WORKLOADS = {  # bench/runtime: what each child process times
    "update-short-full": "one update, 16 short rows (~80 tokens), full fine-tuning",
    "update-short-lora": "one update, 16 short rows, LoRA r=16",
    "update-long-lora": "one update, 8 Search-R1-shaped rollouts (280–1200 tokens), LoRA r=16",
    "generate": "transformers sampling, 16 chat prompts × 32 new tokens",
}


# ---- formatting ---------------------------------------------------------------------------

def num(x: float | None) -> str:
    """A measured value with three significant figures or so (— when absent)."""
    if x is None:
        return "—"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def times(x: float) -> str:
    """A ratio, as a factor."""
    return f"{x:.2f}×"


def percent(x: float) -> str:
    """A share, in per cent."""
    return f"{100 * x:.1f} %"


def interval(value: float, ci: list[float], signed: bool = False) -> str:
    """A mean (or difference) with its 95 % interval."""
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(value)} [{f.format(ci[0])}, {f.format(ci[1])}]"


def markdown(table: Table) -> str:
    """A pipe table."""
    header, rows = table
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def source(name: str, report: dict) -> str:
    """The line under a table: its file, and the machine and load it was measured under."""
    facts = [report.get("cpu") or report.get("machine", {}).get("cpu")]
    if report.get("allocator"):
        facts.append(f"the benchmark process's allocator: {report['allocator']}")
    for key, when in (("load_average_1m_at_end", "at the end"),
                      ("load_average_1min_at_start", "at the start")):
        if report.get(key) is not None:
            facts.append(f"load {report[key]:.1f} {when}")
    details = "; ".join(fact for fact in facts if fact)
    return f"*`bench/results/{name}`" + (f" — {details}*" if details else "*")


# ---- speed: updates and whole steps -----------------------------------------------------

def update_table(report: dict) -> Table:
    """bench/updates/bench_update.py: one way per row, each adding one change to the row above."""
    precision = "bf16" if "bf16_matmul_peak_gflops" in report else "fp32"
    peak = report.get(f"{precision}_matmul_peak_gflops")
    header = ["update", "seconds", "× the row above", "GFLOP/s (6·N·T)",
              f"share of the {precision} matmul peak ({num(peak)} GFLOP/s)"]
    rows, previous = [], None
    for way, row in report["rows"].items():
        speedup = "—" if previous is None else times(previous / row["update_s"])
        rows.append([way, num(row["update_s"]), speedup, num(row["gflops_6NT"]),
                     percent(row[f"share_of_{precision}_peak"])])
        previous = row["update_s"]
    return header, rows


def trl_table(report: dict) -> Table:
    """bench/steps/bench_trl.py: our GRPO step against TRL's, each variant in its own process."""
    header = ["variant", "ours / TRL tokens/s", "ours / TRL step s", "rollout s (ours / TRL)",
              "update s (ours / TRL)", "tokens/s (ours / TRL)"]
    rows = []
    for row in report["rows"]:
        ours, trl = row["ours"], row["trl"]
        rows.append([row["mode"], times(ours["tokens_per_s"] / trl["tokens_per_s"]),
                     f"{ours['step_s'] / trl['step_s']:.2f}",
                     f"{num(ours['rollout_s'])} / {num(trl['rollout_s'])}",
                     f"{num(ours['update_s'])} / {num(trl['update_s'])}",
                     f"{ours['tokens_per_s']:.0f} / {trl['tokens_per_s']:.0f}"])
    return header, rows


def cost_growth_table(report: dict) -> Table:
    """bench/steps/bench_cost_growth.py: one factor at a time around group 4, 2 turns, 16
    trajectories, 64 new tokens a call."""
    header = ["group", "turns", "trajectories", "new tokens", "step s (rollout / update)",
              "tokens updated", "searches / trajectory", "peak RSS GiB"]
    rows = [[str(r["group_size"]), str(r["max_turns"]), str(r["trajectories"]),
             str(r["max_new_tokens"]),
             f"{num(r['median_step_s'])} ({num(r['median_rollout_s'])} / "
             f"{num(r['median_update_s'])})",
             f"{r['median_tokens']:,.0f}", f"{r['median_searches']:.2f}",
             num(r.get("peak_rss_gib"))] for r in report["rows"]]
    return header, rows


def train_table(report: dict) -> Table:
    """bench/updates/bench_train.py: full fine-tuning against LoRA, against the fp32 peak."""
    header = ["mode", "step s", "tokens/s", "model GFLOP/s",
              f"share of the fp32 peak ({num(report['fp32_matmul_peak_gflops'])} GFLOP/s)",
              "peak RSS GiB"]
    return header, [[r["mode"], num(r["step_s"]), num(r["tokens_per_s"]), num(r["model_gflops"]),
                     percent(r["mfu"]), num(r["peak_rss_gib"])] for r in report["rows"]]


def attention_table(report: dict) -> Table:
    """bench/updates/bench_attention.py: one forward + backward per kernel and width."""
    with_blocks = "amx_s" in report["rows"][0]
    header = ["tokens", "SDPA flash s", "SDPA math s", "math / flash"]
    header += ["block kernels s", "best SDPA / block kernels"] if with_blocks else []
    rows = []
    for r in report["rows"]:
        row = [str(r["width"]), num(r["flash_s"]), num(r["math_s"]), f"{r['math_s'] / r['flash_s']:.2f}"]
        if with_blocks:
            row += [num(r["amx_s"]), f"{min(r['flash_s'], r['math_s']) / r['amx_s']:.2f}"]
        rows.append(row)
    return header, rows


def compile_payback_table(report: dict) -> Table:
    """bench/updates/bench_compile_payback.py: what a compiled update costs and saves."""
    return (["sequences (batch)", "compile cost s", "saved a sequence s", "break-even sequences",
             "compiled / eager speed", "compile_update: auto from"],
            [[f"{report['sequences']} ({report['batch_size']})", num(report["compile_cost_s"]),
              num(report["saving_per_sequence_s"]), num(report["break_even_sequences"]),
              times(report["speedup_after_compile"]),
              str(report["auto_compile_min_sequences"])]])


def optimizer_table(report: dict) -> Table:
    """bench/updates/bench_optimizer.py: one AdamW step over every weight."""
    fastest = min(report["step_s"].values())
    return (["AdamW", "seconds", "× the fastest"],
            [[way, f"{s:.3f}", times(s / fastest)] for way, s in report["step_s"].items()])


# ---- speed: rollouts ----------------------------------------------------------------------

def rollout_replay_table(report: dict) -> Table:
    """bench/rollouts/bench_rollout_replay.py: the agent loop against its raw engine."""
    header = ["back-end", "episode", "loop tokens/s", "raw engine tokens/s", "loop / raw",
              "engine start s"]
    return header, [[r["mode"], r["episode"], num(r["median_loop_tokens_per_s"]),
                     num(r["median_raw_tokens_per_s"]),
                     f"{r['median_loop_tokens_per_s'] / r['median_raw_tokens_per_s']:.2f}",
                     num(r["engine_start_s"])] for r in report["rows"]]


def decoding_table(report: dict) -> Table:
    """bench/rollouts/bench_decoding.py: each generator's seconds on the same episodes, and our
    loop's tokens/s over each other generator's."""
    generators = list(next(iter(report["temperatures"].values()))["median_seconds"])
    others = [g for g in generators if g != "ours"]
    header = ["episodes", *(f"{g} s" for g in generators),
              *(f"ours / {g} tokens/s" for g in others)]
    rows = []
    for temperature, result in report["temperatures"].items():
        label = "greedy" if float(temperature) == 0 else f"sampled at temperature {temperature}"
        rates = result["median_tokens_per_s"]
        rows.append([label, *(num(result["median_seconds"][g]) for g in generators),
                     *(times(rates["ours"] / rates[g]) for g in others)])
    return header, rows


def sampling_table(report: dict) -> Table:
    """bench/rollouts/bench_sampling.py: drawing a token, and whole decodes, each way."""
    return (["draw", "one draw ms", "decode s"],
            [[way, num(report["draw_ms"][way]), num(report["decode_s"][way])]
             for way in report["draw_ms"]])


def push_table(report: dict) -> Table:
    """bench/rollouts/bench_push.py: refreshing a sampler's weights after an update."""
    return ["push", "seconds"], [[way, f"{s:.2f}"] for way, s in report["push_s"].items()]


def arr_sampling_table(report: dict) -> Table:
    """bench/rollouts/bench_arr_sampling.py: both ARR agents' dialogues, each way."""
    return (["samplers", "tokens/s", "seconds"],
            [[way, num(r["median_tokens_per_s"]), num(r["median_seconds"])]
             for way, r in report["rows"].items()])


def difficulty_rollouts_table(report: dict) -> Table:
    """bench/rollouts/bench_difficulty_rollouts.py: UR² curation's rollouts per back-end."""
    header = ["back-end", "rollouts/s", "generated tokens/s", "train split at k = 4 / 20, h"]
    rows = []
    for backend, r in report["rows"].items():
        hours = r["projected_hours_for_train_split"]
        rows.append([backend, num(r["rollouts_per_s"]), num(r["generated_tokens_per_s"]),
                     f"{hours['k=4']:.2f} / {hours['k=20']:.2f}"])
    return header, rows


def rollout_compile_payback_table(report: dict) -> Table:
    """bench/rollouts/bench_rollout_compile_payback.py: an eager engine against compiled ones."""
    header = ["engine", "start s", "first round s", "later rounds, median s", "compile cost s",
              "saved a rollout ms", "break-even rollouts"]
    rows = []
    for variant, r in report["variants"].items():
        payback = report.get(f"payback_{variant}")
        rows.append([variant, num(r["start_s"]), num(r["first_round_s"]),
                     num(statistics.median(r["rounds_s"])),
                     *(["—"] * 3 if payback is None else [
                         num(payback["compile_cost_s"]),
                         num(1000 * payback["saved_s_per_rollout"]),
                         num(payback["break_even_rollouts"])])])
    return header, rows


def rollout_precision_table(report: dict) -> Table:
    """bench/rollouts/bench_rollout_precision.py: transformers rollouts, live or from a copy."""
    rates = report["median_tokens_per_s"]
    first = next(iter(rates.values()))
    return (["sampling", "tokens/s", "× the first row"],
            [[mode, num(rate), times(rate / first)] for mode, rate in rates.items()])


def generation_table(report: dict) -> Table:
    """bench/rollouts/bench_generation.py: batched ARR dialogues against one at a time."""
    rates = report["median_tokens_per_s"]
    return (["ARR dialogues", "tokens/s", "× one at a time"],
            [[way, num(rate), times(rate / rates["sequential"])] for way, rate in rates.items()])


def rollout_table(report: dict) -> Table:
    """bench/rollouts/bench_rollout.py: rollouts, pushes and a GRPO step per back-end."""
    return (["back-end", "engine start s", "rollout tokens/s", "push s", "GRPO step s",
             "peak RSS GiB"],
            [[r["mode"], num(r.get("engine_start_s")), num(r["median_rollout_tokens_per_s"]),
              num(r.get("median_push_s")), num(r.get("median_grpo_step_s")),
              num(r.get("peak_rss_gib"))] for r in report["rows"]])


# ---- speed: process settings, retrieval, the user's commands --------------------------------

def allocator_table(report: dict) -> Table:
    """bench/runtime/bench_allocator.py: each workload under glibc's malloc and tcmalloc."""
    header = ["workload (SmolLM2-135M, bf16, micro-batch 4)", "glibc malloc s", "tcmalloc s",
              "glibc / tcmalloc", "peak memory glibc → tcmalloc GiB"]
    rows = []
    for workload, r in report["rows"].items():
        system, tcmalloc = r["median"]["system"], r["median"]["tcmalloc"]
        rows.append([WORKLOADS.get(workload, workload), num(system["seconds"]),
                     num(tcmalloc["seconds"]), f"{system['seconds'] / tcmalloc['seconds']:.2f}",
                     f"{system['peak_rss_gib']:.2f} → {tcmalloc['peak_rss_gib']:.2f}"])
    return header, rows


def omp_wait_table(report: dict) -> Table:
    """bench/runtime/bench_omp_wait.py: each workload with OMP_WAIT_POLICY=PASSIVE and unset."""
    header = ["workload (SmolLM2-135M, bf16, micro-batch 4)", "PASSIVE s", "unset s",
              "PASSIVE / unset"]
    rows = []
    for workload, r in report["rows"].items():
        passive, default = r["median_s"]["PASSIVE"], r["median_s"]["default"]
        rows.append([WORKLOADS.get(workload, workload), num(passive), num(default),
                     f"{passive / default:.2f}"])
    return header, rows


def retrieval_table(report: dict) -> Table:
    """bench/retrieval/bench_retrieval.py: FAISS and brute force by corpus size."""
    k = report["config"]["k"]
    return (["passages", "index", "build s", "queries/s", f"recall@{k}"],
            [[f"{r['n']:,}", r["method"], num(r["build_s"]), num(r["qps"]),
              f"{r['recall_at_k']:.3f}"] for r in report["index"]])


def retrieval_embedder_table(report: dict) -> Table:
    """bench/retrieval/bench_retrieval.py: the embedder on the world's passages."""
    return (["embedder", "precision", "passages", "passages/s"],
            [[r["model"], r["precision"], str(r["passages"]), num(r["passages_per_s"])]
             for r in report["embedder"]])


def demo_table(report: dict) -> Table:
    """bench/jobs/bench_demo.py: the demo job's wall time and peak memory."""
    return (["config", "fresh stores", "wall s", "peak RSS GiB", "the demo's allocator"],
            [[report["config"], "yes" if report["fresh"] else "no", num(report["median_wall_s"]),
              num(report["peak_rss_gib"]), report.get("demo_allocator", "not recorded")]])


def demo_pipeline_table(report: dict) -> Table:
    """bench/jobs/bench_demo.py: the reasoner the demo's pipeline printed, per stage, on its
    held-out questions (greedy Search-R1)."""
    rows = []
    for stage, label in (("base", "untrained base"), ("warmup", "after the SFT warm-up"),
                         ("trained", "after joint RL")):
        for s in report["pipeline"]["trained"].get(stage, {}).values():
            rows.append([label, f"{s['n']:.0f}", interval(s["em"], [s["em_lo"], s["em_hi"]]),
                         interval(s["f1"], [s["f1_lo"], s["f1_hi"]]),
                         f"{s['format_errors']:.2f}", f"{s['n_searches']:.2f}",
                         f"{s['cut_turns']:.2f}" if "cut_turns" in s else "not counted"])
    return (["reasoner", "questions", "EM [95% CI]", "F1 [95% CI]", "format errors", "searches",
             "turns cut by max_new_tokens"], rows)


def demo_adversarial_table(report: dict) -> Table:
    """bench/jobs/bench_demo.py: what the demo's adversarial stage did — the discriminator on its
    held-out slices, and the joint update's reward terms (the last update's when several)."""
    judge, rewards = report["pipeline"]["judge"], report["pipeline"]["trained"].get("rewards", {})
    m = judge["metrics"]
    auroc = "n/a" if m["auroc"] != m["auroc"] else f"{m['auroc']:.3f}"  # NaN: one label scored
    return (["held-out slices", "verdict accuracy", "verdict F1", "malformed verdicts",
             "AUROC of P(yes)", *rewards],
            [[f"{m['n']:.0f}", f"{m['accuracy']:.3f}", f"{m['f1']:.3f}", f"{m['malformed']:.0f}",
              auroc, *(f"{v[-1]:.3f}" for v in rewards.values())]])


def nightly_table(report: dict) -> Table:
    """bench/jobs/bench_nightly.py: each night's wall time and Prefect's share of it."""
    return (["night", "wall s", "task runs", "slowest task", "alias", "Prefect's share (bound)"],
            [[n["night"], num(n["wall_s"]), str(n["n_task_runs"]),
              ", ".join(f"{task} {num(s)} s" for task, s in list(n["slowest_tasks"].items())[:1]),
              n.get("alias") or "—", percent(n["prefect_share_upper_bound"])]
             for n in report["nights"]])


def ui_table(report: dict) -> Table:
    """bench/jobs/bench_ui.py: start times of the two servers `make ui` runs."""
    return (["server", "cold start s (new stores)", "warm start s"],
            [[server, num(report[f"cold_{server}_median_s"]), num(report[f"warm_{server}_median_s"])]
             for server in ("MLflow", "Prefect")])


# ---- learning -------------------------------------------------------------------------------

def scored_row(label: str, s: dict) -> list[str]:
    """A benchmark summary: EM and F1 with their intervals, format errors and searches."""
    f1 = (interval(s["f1"], [s["f1_lo"], s["f1_hi"]]) if "f1_lo" in s else f"{s['f1']:.3f}")
    return [label, interval(s["em"], [s["em_lo"], s["em_hi"]]), f1, num(s["format_errors"]),
            num(s["n_searches"])]


SCORED = ["model", "EM [95% CI]", "F1 [95% CI]", "format errors", "searches"]


def warmup_table(report: dict) -> Table:
    """bench/learning/bench_warmup.py: held-out Search-R1 scores after each warm-up epoch."""
    return SCORED, [scored_row(m, s) for m, s in report["held_out_search_r1"].items()]


def arr_compare_table(report: dict) -> Table:
    """bench/learning/bench_arr_compare.py: ARR, its ablations and GRPO at one budget."""
    return SCORED, [scored_row(m, s) for m, s in report["held_out"].items()]


def learning_table(report: dict) -> Table:
    """bench/learning/bench_learning.py: the train flow's base, warmed-up and trained models."""
    return SCORED, [scored_row(stage, next(iter(scores.values())))
                    for stage, scores in report["models"].items()]


PAIRED = ["pair", "EM", "F1", "format errors", "searches"]


def paired_row(pair: str, diffs: dict) -> list[str]:
    """Paired differences with their 95 % intervals."""
    return [pair.replace("-", " − "),
            *(interval(diffs[m]["diff"], diffs[m]["ci95"], signed=True)
              for m in ("em", "f1", "format_errors", "n_searches"))]


def ur2_run_table(report: dict) -> Table:
    """bench/learning/bench_ur2.py: the start policy and both arms on the held-out questions."""
    rows = [[policy, interval(r["em"]["mean"], r["em"]["ci95"]),
             interval(r["f1"]["mean"], r["f1"]["ci95"]), num(r["format_errors"]),
             num(r["n_searches"])] for policy, r in report["heldout_results"].items()]
    return ["policy", "EM [95% CI]", "F1 [95% CI]", "format errors", "searches"], rows


def ur2_run_paired_table(report: dict) -> Table:
    """bench/learning/bench_ur2.py: the paired differences between the policies."""
    return PAIRED, [paired_row(pair, diffs) for pair, diffs in report["paired"].items()]


def ur2_pooled_table(report: dict) -> Table:
    """bench/learning/bench_ur2_pool.py: each pair's difference averaged over the seeds."""
    return PAIRED, [paired_row(pair, diffs) for pair, diffs in report["pooled"].items()]


def ur2_pooled_by_group_table(report: dict) -> Table:
    """bench/learning/bench_ur2_pool.py: the gains within each question type."""
    header = ["question type", "questions", "curated − start F1", "uncurated − start F1"]
    return header, [[group, str(r["questions"]),
                     interval(r["curated-start"]["f1"]["diff"], r["curated-start"]["f1"]["ci95"],
                              signed=True),
                     interval(r["uncurated-start"]["f1"]["diff"],
                              r["uncurated-start"]["f1"]["ci95"], signed=True)]
                    for group, r in report["by_group"].items()]


def ur2_dev_table(report: dict) -> Table:
    """bench/learning/bench_ur2_dev.py: a policy on the dev split, per question type."""
    header = ["question type", "questions", "EM", "F1", "searches", "format errors",
              "gold retrieved", "gold in its own text"]
    groups = {"all": report["all"], **report["by_type"]}
    return header, [[group, str(r["n"]), f"{r['em']:.2f}", f"{r['f1']:.3f}", num(r["searches"]),
                     num(r["format_errors"]), f"{r['gold_retrieved']:.2f}",
                     f"{r['gold_in_generated']:.2f}"] for group, r in groups.items()]


def ur2_curation_table(report: dict) -> Table:
    """bench/learning/bench_ur2_curation.py: what curation's rollouts solve, per question type."""
    header = ["question type", "questions", "rollouts", "with answer credit", "correct",
              "levels"]
    return header, [[group, str(r["questions"]), str(r["rollouts"]), str(r["credited"]),
                     str(r["correct"]),
                     ", ".join(f"{level} {n}" for level, n in sorted(r["levels"].items()))]
                    for group, r in report["by_type"].items()]


def rex_table(report: dict) -> Table:
    """bench/learning/bench_rex_rag.py: each policy on the held-out questions, per question kind."""
    kinds = ("single", "two-hop", "three-hop", "comparison")
    header = ["policy", "F1 [95% CI]", *(f"{kind} F1" for kind in kinds), "searches"]
    return header, [[policy, interval(r["f1"]["mean"], r["f1"]["ci95"]),
                     *(num(r["by_kind"][kind]["f1"]) if kind in r["by_kind"] else "—"
                       for kind in kinds), num(r["searches"])]
                    for policy, r in report["heldout_results"].items()]


def rex_test_table(report: dict) -> Table:
    """bench/learning/bench_rex_rag.py: the declared paired comparisons (seed means); a record
    whose arms have not all run has none yet."""
    test = report["test"]
    if test is None:
        return ["comparison", "questions", "difference [95% CI]"], [
            ["not yet: arms still to run", str(len(report["arms_missing"])),
             ", ".join(report["arms_missing"])]]
    names = [name for name in ("rex-grpo_f1_multi_hop", "rex-grpo_f1_all", "grpo-start_f1_chained",
                               "rex-start_f1_chained", "grpo-start_searches_chained",
                               "rex-start_searches_chained", "rex-start_searches_multi_hop",
                               "grpo-start_searches_multi_hop") if name in test]
    rows = [[name.replace("-", " − ").replace("_", " "), str(test[name]["n"]),
             interval(test[name]["diff"], test[name]["ci95"], signed=True)] for name in names]
    return ["comparison", "questions", "difference [95% CI]"], rows


def rex_vs_start_table(report: dict) -> Table:
    """bench/learning/bench_rex_rag.py: each finished arm − its own start, per question."""
    header = ["arm", "start", "F1 chained − start", "F1 multi-hop − start",
              "searches chained − start", "finished", "CPU"]
    return header, [[name, report["start_digests"][name][:8],
                     *(interval(d[key]["diff"], d[key]["ci95"], signed=True)
                       for key in ("f1_chained", "f1_multi_hop", "searches_chained")),
                     report["arms"][name]["finished"], report["arms"][name]["cpu"]]
                    for name, d in report["vs_own_start"].items()]


def rex_probes_table(report: dict) -> Table:
    """bench/learning/bench_rex_probes.py: what the probes of one probing rollout did, per
    question kind (shares of the probes opened)."""
    header = ["questions", "probes", "full marks", "searched again", "same answer",
              "no answer", "probe F1", "its origin's F1"]
    rows = [[kind, f"{o['probes']:.0f}", f"{o['full_marks']:.0f}",
             *(f"{o[key]:.2f}" for key in ("probe_new_searches", "probe_same_answer",
                                            "probe_unanswered", "probe_f1", "probe_origin_f1"))]
            for kind, o in report["outcomes"].items()]
    return header, rows


def rex_probes_turns_table(report: dict) -> Table:
    """The turns each probe got before its forced answer (its origin's left, or its own)."""
    total = sum(report["turns_left"].values())
    return (["turns before the forced answer", "probes", "share"],
            [[turns, str(count), f"{count / total:.2f}"]
             for turns, count in sorted(report["turns_left"].items(), key=lambda t: int(t[0]))])


def ur2_summary_table(report: dict) -> Table:
    """bench/steps/bench_ur2_summary.py: one UR² update with LLM summaries and with raw documents,
    medians of the same rounds; what the summariser answered, summed over its updates."""
    raw = report["median"]["raw_docs"]["total_s"]
    rows = []
    for variant, label in (("summaries", "configs/ur2.yaml (summaries)"),
                           ("raw_docs", "configs/ur2-raw-docs.yaml")):
        m, runs = report["median"][variant], report["runs"][variant]
        answered = "—" if variant == "raw_docs" else ", ".join(
            f"{sum(r[k] for r in runs)} {label}" for k, label in (
                ("summaries", "summaries"), ("fallbacks", "fallback messages"),
                ("raw_fallbacks", "raw documents")))
        rows.append([label, str(len(runs)), num(m["total_s"]), num(m["rollout_s"]),
                     num(m["update_s"]), times(m["total_s"] / raw), num(m["searches"]), answered])
    return (["config", "updates", "step s", "rollout s", "update s", "× raw documents",
             "searches per rollout", "summariser answered"], rows)


def retrieval_server_table(report: dict) -> Table:
    """bench/retrieval/bench_retrieval_server.py: one client and many against the server, with
    batching on and off; the many clients' speed-up over one, and the big request's answer."""
    rows = []
    for setting, r in report["settings"].items():
        for phase in ("one_client", "many_clients"):
            m, big = r[phase], r[phase]["big_request"]
            rows.append([setting, str(m["clients"]), num(m["qps"]),
                         times(m["qps"] / r["one_client"]["qps"]),
                         f"{1000 * m['p50_s']:.0f}", f"{1000 * m['p99_s']:.0f}", str(m["errors"]),
                         "—" if big is None else f"HTTP {big['status']} in {big['seconds']:.2f} s",
                         num(r["mean_batch_queries"]) if phase == "many_clients" else ""])
    one = report["in_process_qps_by_batch"]["1"]
    rows += [[f"no server: a batch of {size}", "", num(qps), times(qps / one), "", "", "", "", size]
             for size, qps in report["in_process_qps_by_batch"].items()]
    return (["server", "clients", "queries/s", "× one client", "p50 ms", "p99 ms", "errors",
             f"{report['big_request_queries']:,}-query request", "mean batch (queries)"], rows)


def protocol_table(report: dict) -> Table:
    """bench/rollouts/bench_protocol.py: the tag parser's time on malformed output as it grows."""
    return (["shape", "chars at 4n", "ms at n", "at 2n", "at 4n", "n → 4n (4.0 = linear)"],
            [[name, f"{shape['runs'][-1]['chars']:,}",
              *(f"{1000 * r['seconds']:.2f}" for r in shape["runs"]),
              f"{shape['growth_n_to_4n']:.1f}×"] for name, shape in report["shapes"].items()])


def embed_memory_table(report: dict) -> Table:
    """bench/retrieval/bench_embed_memory.py: `advrag embed`'s peak memory as the corpus grows,
    beside the corpus's and the embeddings' sizes (the last two columns relative to the first
    run's)."""
    first = report["runs"][0]
    return (["passages", "shard", "corpus MiB", "embeddings MiB", "wall s", "peak RSS MiB",
             "corpus ×", "peak RSS ×"],
            [[f"{r['passages']:,}", f"{r['shard_size']:,}", num(r["corpus_mib"]),
              num(r["embeddings_mib"]), num(r["wall_s"]), num(r["peak_rss_mib"]),
              f"{r['passages'] / first['passages']:.1f}",
              f"{r['peak_rss_mib'] / first['peak_rss_mib']:.2f}"] for r in report["runs"]])


def gar_table(report: dict) -> Table:
    """bench/learning/bench_gar_pipeline.py: warm-up vs GAR-trained per seed and pooled (paired
    on the same held-out questions), and each seed's discriminator on its held-out slices."""
    rows = []
    for seed, run in report["seed_runs"].items():
        test, judge = report["test"]["per_seed"][seed]["all"], run["discriminator"]
        warm, trained = (report["heldout_results"][f"{stage}-seed{seed}"]["f1"]
                         for stage in ("warmup", "trained"))
        rows.append([f"seed {seed}", interval(warm["mean"], warm["ci95"]),
                     interval(trained["mean"], trained["ci95"]),
                     interval(test["f1"]["diff"], test["f1"]["ci95"], signed=True),
                     interval(test["em"]["diff"], test["em"]["ci95"], signed=True),
                     f"{judge['n']:.0f}", f"{judge['accuracy']:.3f}", f"{judge['f1']:.3f}",
                     f"{judge['auroc']:.3f}"])
    pooled = report["test"]["pooled"]["all"]
    rows.append(["seeds pooled", "", "", interval(pooled["f1"]["diff"], pooled["f1"]["ci95"],
                                                  signed=True),
                 interval(pooled["em"]["diff"], pooled["em"]["ci95"], signed=True),
                 "", "", "", ""])
    return (["run", "warm-up F1 [95% CI]", "GAR-trained F1", "trained − warm-up F1",
             "trained − warm-up EM", "held-out slices", "judge accuracy", "judge F1",
             "judge AUROC"], rows)


def gar_by_kind_table(report: dict) -> Table:
    """bench/learning/bench_gar_pipeline.py: per question kind, the seeds pooled."""
    pooled = report["test"]["pooled"]
    return (["question kind", "questions", "warm-up F1", "GAR-trained F1",
             "trained − warm-up F1 [95% CI]"],
            [[kind, str(r["f1"]["n"]), f"{r['warmup_f1']:.3f}", f"{r['trained_f1']:.3f}",
              interval(r["f1"]["diff"], r["f1"]["ci95"], signed=True)]
             for kind, r in pooled.items() if kind != "all"])


def gar_rewards_table(report: dict) -> Table:
    """bench/learning/bench_gar_pipeline.py: each seed's reward terms over its joint updates."""
    names = ("R_m", "R_s", "R_d", "R_a")
    rows = [[f"seed {seed}", str(len(curves["R_m"])),
             *(f"{v[0]:.2f} → {v[-1]:.2f} ({statistics.mean(v):.2f})" for v in
               (curves[name] for name in names))]
            for seed, curves in report["curves"].items()]
    return ["run", "updates", *(f"{n}: first → last (mean)" for n in names)], rows


def scoreboard_table(report: dict) -> Table:
    """Each record's arms per question kind: F1, and its paired differences with intervals (the
    gains' difference only where a record's arms began from different starts)."""
    def versus(d: dict | None) -> str:
        return "—" if d is None else interval(d["diff"], d["ci"], signed=True)

    header = ["record", "arm", "seeds", "kind", "rows", "F1", "− start [95% CI]",
              "− GRPO [95% CI]", "gain − GRPO's gain [95% CI]"]
    return header, [[r["record"], r["arm"], ", ".join(r["seeds"]) or "—", r["kind"], str(r["n"]),
                     f"{r['f1']:.3f}", versus(r["vs_start"]), versus(r["vs_grpo"]),
                     versus(r.get("gain_vs_grpo"))]
                    for r in report["rows"]]


def scoreboard_records_table(report: dict) -> Table:
    """What each record of the scoreboard is: its page, world, budget and command."""
    header = ["record", "page", "world", "budget per run", "reproduce"]
    return header, [[r["record"], f"[{r['page']}]({r['page']})", r["world"], r["budget"],
                     f"`{r['command']}`"] for r in report["records"]]


def chaining_warmup_table(report: dict) -> Table:
    """Each warm-up snapshot per question kind: answers, format, searches and chaining."""
    def value(x: float | None, fmt: str = "{:.3f}") -> str:
        return "—" if x is None else fmt.format(x)

    header = ["snapshot", "kind", "questions", "EM", "F1", "format errors", "searches",
              "hop recall", "chaining rate", "turns cut"]
    return header, [[snapshot, kind, value(m["n"], "{:.0f}"), value(m["em"]), value(m["f1"]),
                     value(m["format_errors"], "{:.2f}"), value(m["n_searches"], "{:.2f}"),
                     value(m["hop_recall"]), value(m["chaining_rate"]),
                     value(m["cut_turns"], "{:.2f}")]
                    for snapshot, kinds in report["snapshots"].items()
                    for kind, m in kinds.items() if m["n"]]


def judge_table(report: dict) -> Table:
    """The judge's held-out measures over every slice and per source, the AUROC with its
    interval over questions where the report has one."""
    m, intervals = report["heldout"], report.get("heldout_auroc_ci", {})

    def row(label: str, prefix: str) -> list[str]:
        def value(key: str, fmt: str = "{:.3f}") -> str:
            x = m.get(prefix + key)
            return "n/a" if x is None or x != x else fmt.format(x)  # NaN: one label scored
        auroc = (interval(m[prefix + "auroc_all"], intervals[label]) if label in intervals
                 else value("auroc_all"))
        return [label, value("n", "{:.0f}"), auroc, value("auroc"),
                value("accuracy"), value("f1"), value("malformed", "{:.0f}")]

    sources = sorted({k.split("/")[0] for k in m if "/" in k})
    return (["held-out slices", "n", "AUROC, every slice [95% CI over questions]",
             "AUROC (with a verdict)", "accuracy", "F1", "malformed"],
            [row("all", ""), *(row(source, f"{source}/") for source in sources)])


def judge_epochs_table(report: dict) -> Table:
    """The judge's SFT epoch by epoch: the dev slices' AUROC and loss, which chose the kept
    epoch (marked)."""
    kept = report["training"]["best_epoch"]
    return (["epoch", "dev AUROC", "dev loss", "kept"],
            [[str(e["epoch"]), f"{e['auroc']:.3f}", f"{e['loss']:.4f}",
              "yes" if e["epoch"] == kept else ""] for e in report["epochs"]])


ARR_WARMUP_KINDS = ("single", "comparison", "two-hop", "three-hop")


def arr_warmup_table(report: dict) -> Table:
    """ARR's warm-up sizes on dev, one row each: the dialogues it learned from (per kind), its
    SFT, and its pair's dialogue on the dev questions; the chosen size marked."""
    def row(size: str, m: dict) -> list[str]:
        dev, kinds = m["dev"], m["dev"]["by_kind"]
        held = " / ".join(str(m["dialogues_by_kind"].get(k, 0)) for k in ARR_WARMUP_KINDS)
        two_hop = kinds.get("two-hop", {})
        return [size, held, f"{m['sft']['steps']}", interval(dev["f1"]["mean"], dev["f1"]["ci95"]),
                *(f"{kinds[k]['f1']:.3f}" if k in kinds else "—" for k in ARR_WARMUP_KINDS),
                f"{dev['searches']:.2f}", f"{two_hop.get('chaining_rate', float('nan')):.2f}",
                f"{dev['format_errors']:.2f}", f"{dev['cut_turns']:.2f}",
                f"{m['verifier'].get('verifier/flagged_wrong', float('nan')):.3f}",
                "yes" if int(size) == report.get("chosen") else ""]

    return (["dialogues", "of which single / comparison / two-hop / three-hop", "SFT steps",
             "dev F1 [95% CI]", *(f"F1 {k}" for k in ARR_WARMUP_KINDS), "searches",
             "chaining rate (two-hop)", "format errors", "turns cut", "verifier flagged wrong",
             "chosen"],
            [row(size, m) for size, m in sorted(report["sizes"].items(), key=lambda x: int(x[0]))])


def budget_cost_table(report: dict) -> Table:
    """Old and new budgets' median update, side by side, and new / old."""
    keys = ("tokens", "seconds", "rollout_s", "update_s", "searches", "cut_turns",
            "truncated_fraction")
    old, new = report["medians"]["old"], report["medians"]["new"]
    return (["budgets", *keys], [
        ["old (2 turns, 64 tokens, 1024)", *(f"{old[k]:.2f}" for k in keys)],
        ["new (4 turns, 128 tokens, 3072)", *(f"{new[k]:.2f}" for k in keys)],
        ["new / old", *(f"{new[k] / old[k]:.2f}" if old[k] else "—" for k in keys)]])


def budgets_table(report: dict) -> Table:
    """Each config's token budgets against its episode's bound, term by term."""
    header = ["config", "budget", "tokens", "= prompt", "+ generations × max_new_tokens",
              "+ searches × information", "+ hints", "bound", "headroom"]
    return header, [[r["config"], r["setting"], str(r["budget"]), str(r["prompt"]),
                     f"{r['generations']} × {r['max_new_tokens']}",
                     f"{r['searches']} × {r['information']}", str(r["hints"]), str(r["bound"]),
                     str(r["budget"] - r["bound"])] for r in report["configs"]]


def budgets_demonstrations_table(report: dict) -> Table:
    """Demonstration lengths in tokens by passage length and searches."""
    header = ["passage words", "searches", "demonstrations", "median tokens", "longest"]
    return header, [[str(r["passage_words"]), str(r["searches"]), str(r["demonstrations"]),
                     f"{r['median']:.0f}", str(r["max"])] for r in report["demonstrations"]]


TABLES: dict[str, Callable[[dict], Table]] = {
    "update": update_table, "trl": trl_table, "cost_growth": cost_growth_table,
    "train": train_table, "attention": attention_table,
    "compile_payback": compile_payback_table, "optimizer": optimizer_table,
    "rollout_replay": rollout_replay_table, "decoding": decoding_table,
    "sampling": sampling_table, "push": push_table, "arr_sampling": arr_sampling_table,
    "difficulty_rollouts": difficulty_rollouts_table,
    "rollout_compile_payback": rollout_compile_payback_table,
    "rollout_precision": rollout_precision_table, "generation": generation_table,
    "rollout": rollout_table, "allocator": allocator_table, "omp_wait": omp_wait_table,
    "retrieval": retrieval_table, "retrieval:embedder": retrieval_embedder_table,
    "demo": demo_table, "demo:pipeline": demo_pipeline_table,
    "demo:adversarial": demo_adversarial_table, "nightly": nightly_table, "ui": ui_table, "warmup": warmup_table,
    "arr_compare": arr_compare_table, "learning": learning_table, "ur2_run": ur2_run_table,
    "ur2_run:paired": ur2_run_paired_table, "ur2_pooled": ur2_pooled_table,
    "ur2_pooled:by_group": ur2_pooled_by_group_table, "ur2_dev": ur2_dev_table,
    "ur2_curation": ur2_curation_table, "rex": rex_table, "rex:test": rex_test_table,
    "rex:vs_start": rex_vs_start_table, "rex_probes": rex_probes_table,
    "rex_probes:turns_left": rex_probes_turns_table,
    "ur2_summary": ur2_summary_table, "embed_memory": embed_memory_table,
    "retrieval_server": retrieval_server_table, "protocol": protocol_table, "gar": gar_table, "gar:by_kind": gar_by_kind_table, "gar:rewards": gar_rewards_table,
    "budgets": budgets_table, "budgets:demonstrations": budgets_demonstrations_table,
    "chaining_warmup": chaining_warmup_table, "budget_cost": budget_cost_table, "judge": judge_table, "judge:epochs": judge_epochs_table,
    "arr_warmup": arr_warmup_table,
    "scoreboard": scoreboard_table, "scoreboard:records": scoreboard_records_table,
}
"""Kind (``:view``) → its table."""

UR2_KINDS = (("pooled", "ur2_pooled"), ("arms", "ur2_run"), ("split", "ur2_dev"),
             ("by_type", "ur2_curation"), ("ratio_total", "ur2_summary"))
"""The UR² reports by the key that tells them apart (checked in this order)."""


def kind_of(name: str, report: dict) -> str:
    """The kind of results file ``name``: its name up to the first ``-``, the UR² reports by
    their keys."""
    prefix = name.removesuffix(".json").split("-")[0]
    if prefix != "ur2":
        return prefix
    return next((kind for key, kind in UR2_KINDS if key in report), prefix)


def render(name: str, view: str | None = None, results: Path = RESULTS) -> str:
    """The markdown table of ``results/name`` (in its ``view``), and the line naming its source."""
    path = results / name
    if not path.is_file():
        raise FileNotFoundError(f"no results file {path}")
    report = json.loads(path.read_text())
    kind = kind_of(name, report) + (f":{view}" if view else "")
    if kind not in TABLES:
        raise KeyError(f"{name}: no table for kind {kind!r} in bench/results_tables.py")
    return markdown(TABLES[kind](report)) + "\n\n" + source(name, report)


def expand(text: str, results: Path = RESULTS) -> str:
    """``text`` with every results marker replaced by its table."""
    return MARKER.sub(lambda m: render(m["file"], m["view"], results), text)


def refresh(text: str, results: Path = RESULTS) -> str:
    """``text`` (the README) with each generated block — a results marker, then the table up to
    ``<!-- /results -->`` — made again from its file: the README is plain Markdown, not built."""
    def block(m: re.Match) -> str:
        return f"{m['marker']}\n{render(m['file'], m['view'], results)}\n{END}"
    return BLOCK.sub(block, text)


def on_page_markdown(markdown_text: str, page, config, files) -> str:
    """mkdocs hook: the page's results markers become tables at every build."""
    return expand(markdown_text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="results file names under bench/results/")
    parser.add_argument("--view", help="another view of the files (e.g. paired, by_group)")
    parser.add_argument("--readme", action="store_true", help="make the README's generated "
                        "blocks again from their results files")
    args = parser.parse_args()
    if args.readme:
        README.write_text(refresh(README.read_text()))
    for name in args.files:
        print(render(Path(name).name, args.view) + "\n")


if __name__ == "__main__":
    main()
