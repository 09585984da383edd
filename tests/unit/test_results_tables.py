"""The docs' result tables come from the results files: hand-made reports, tables worked out
by hand, and the markers that pages use to ask for them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def tables(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import results_tables

    return results_tables


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Three small reports, as bench_update.py, bench_trl.py and bench_ur2_pool.py write them."""
    update = {"bf16_matmul_peak_gflops": 400.0, "load_average_1m_at_end": 1.5,
              "cpu": "Chip (2 cores; avx2)", "rows": {
                  "before": {"update_s": 30.0, "gflops_6NT": 100.0, "share_of_bf16_peak": 0.25},
                  "+ one pass": {"update_s": 20.0, "gflops_6NT": 150.0,
                                 "share_of_bf16_peak": 0.375}}}
    trl = {"load_average_1min_at_start": 0.5, "rows": [{
        "mode": "full+bf16",
        "ours": {"tokens_per_s": 200.0, "step_s": 6.0, "rollout_s": 2.0, "update_s": 4.0},
        "trl": {"tokens_per_s": 80.0, "step_s": 15.0, "rollout_s": 9.0, "update_s": 6.0}}]}
    diff = {"diff": 0.05, "ci95": [-0.01, 0.11]}
    pooled = {"runs": [], "pooled": {"curated-start": {
        "em": diff, "f1": diff, "format_errors": diff, "n_searches": diff}}}
    for name, report in (("update-test.json", update), ("trl-test.json", trl),
                         ("ur2-test-pooled.json", pooled)):
        (tmp_path / name).write_text(json.dumps(report))
    return tmp_path


def test_the_update_table_compares_each_way_with_the_one_above(tables, results):
    table = tables.render("update-test.json", results=results).splitlines()
    assert table[0] == ("| update | seconds | × the row above | GFLOP/s (6·N·T) | "
                        "share of the bf16 matmul peak (400 GFLOP/s) |")
    assert table[2] == "| before | 30.0 | — | 100 | 25.0 % |"
    assert table[3] == "| + one pass | 20.0 | 1.50× | 150 | 37.5 % |"  # 30 s / 20 s
    assert table[5] == ("*`bench/results/update-test.json` — Chip (2 cores; avx2); "
                        "load 1.5 at the end*")


def test_the_trl_table_divides_ours_by_trls(tables, results):
    row = tables.render("trl-test.json", results=results).splitlines()[2]
    # tokens/s 200 / 80 = 2.5; step 6 / 15 = 0.4
    assert row == "| full+bf16 | 2.50× | 0.40 | 2.00 / 9.00 | 4.00 / 6.00 | 200 / 80 |"


def test_the_judge_table_shows_every_slice_and_each_source(tables, tmp_path):
    nan = float("nan")
    report = {"heldout": {"n": 4, "auroc_all": 0.75, "auroc": 1.0, "accuracy": 0.5, "f1": 0.4,
                          "malformed": 1.0, "rollout/n": 2, "rollout/auroc_all": 0.5,
                          "rollout/auroc": nan, "rollout/accuracy": 0.0, "rollout/f1": 0.0,
                          "rollout/malformed": 1.0},
              "heldout_auroc_ci": {"all": [0.5, 0.9]}}
    (tmp_path / "judge-test.json").write_text(json.dumps(report))
    rows = tables.render("judge-test.json", results=tmp_path).splitlines()
    assert rows[2] == "| all | 4 | 0.750 [0.500, 0.900] | 1.000 | 0.500 | 0.400 | 1 |"
    assert rows[3] == "| rollout | 2 | 0.500 | n/a | 0.000 | 0.000 | 1 |"  # no interval


def test_the_judge_epochs_table_marks_the_kept_epoch(tables, tmp_path):
    report = {"training": {"best_epoch": 1.0},
              "epochs": [{"epoch": 1, "auroc": 0.8123, "loss": 0.51234},
                         {"epoch": 2, "auroc": 0.7, "loss": 0.4}]}
    (tmp_path / "judge-test.json").write_text(json.dumps(report))
    rows = tables.render("judge-test.json", "epochs", results=tmp_path).splitlines()
    assert rows[2:4] == ["| 1 | 0.812 | 0.5123 | yes |", "| 2 | 0.700 | 0.4000 |  |"]


def test_the_arr_warmup_table_lists_sizes_in_order_and_marks_the_chosen_one(tables, tmp_path):
    def size(f1, two_hop):
        kinds = {"single": {"f1": 1.0}, "two-hop": {"f1": two_hop, "chaining_rate": 0.5}}
        return {"dialogues_by_kind": {"single": 2, "two-hop": 1}, "sft": {"steps": 3},
                "dev": {"f1": {"mean": f1, "ci95": [f1 - 0.1, f1 + 0.1]}, "by_kind": kinds,
                        "searches": 1.5, "format_errors": 0.25, "cut_turns": 0.0},
                "verifier": {"verifier/flagged_wrong": 0.125}}

    report = {"chosen": 128, "sizes": {"128": size(0.5, 0.25), "32": size(0.4, 0.0)}}
    (tmp_path / "arr_warmup-test.json").write_text(json.dumps(report))
    rows = tables.render("arr_warmup-test.json", results=tmp_path).splitlines()
    assert rows[2] == ("| 32 | 2 / 0 / 1 / 0 | 3 | 0.400 [0.300, 0.500] | 1.000 | — | 0.000 | — "
                       "| 1.50 | 0.50 | 0.25 | 0.00 | 0.125 |  |")
    assert rows[3].startswith("| 128 | 2 / 0 / 1 / 0 | 3 | 0.500 [0.400, 0.600] | 1.000 | — | 0.250")
    assert rows[3].endswith("| yes |")


def test_a_ur2_report_is_told_apart_by_its_keys(tables, results):
    row = tables.render("ur2-test-pooled.json", results=results).splitlines()[2]
    assert row == ("| curated − start | +0.050 [-0.010, +0.110] | +0.050 [-0.010, +0.110] | "
                   "+0.050 [-0.010, +0.110] | +0.050 [-0.010, +0.110] |")


def test_markers_become_tables_and_a_bad_one_stops_the_build(tables, results):
    page = "Before.\n\n<!-- results: trl-test.json -->\n\nAfter.\n"
    expanded = tables.expand(page, results)
    assert expanded.startswith("Before.\n\n| variant |") and expanded.endswith("\n\nAfter.\n")
    assert "<!--" not in expanded
    with pytest.raises(FileNotFoundError):
        tables.expand("<!-- results: absent.json -->", results)
    with pytest.raises(KeyError, match="trl:paired"):
        tables.expand("<!-- results: trl-test.json paired -->", results)


def test_every_committed_results_file_a_page_names_renders(tables):
    """The docs' markers name results files that exist and have a table (what the strict
    docs build checks too, here without mkdocs)."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    markers = [m for page in docs.rglob("*.md") for m in tables.MARKER.finditer(page.read_text())]
    assert markers
    for marker in markers:
        assert tables.render(marker["file"], marker["view"]).count("\n|") >= 2


def demo_report() -> dict:
    """A demo report as bench_demo.py writes it: the pipeline's numbers for two stages."""
    scored = {"n": 24, "em": 0.25, "em_lo": 0.1, "em_hi": 0.4, "f1": 0.3, "f1_lo": 0.125,
              "f1_hi": 0.5, "format_errors": 0.08, "n_searches": 1.5}
    return {"config": "configs/pipeline-demo.yaml", "wall_s": [300.0], "median_wall_s": 300.0,
            "peak_rss_gib": 9.0, "fresh": True, "cpu": "Chip (2 cores; avx2)",
            "pipeline": {"trained": {"warmup": {"search_r1/world": scored | {"cut_turns": 0.25}},
                                     "trained": {"search_r1/world": scored | {"em": 0.5}}},
                         "judge": None, "decision": {}}}


def test_the_demo_table_lists_the_reasoner_per_stage(tables, tmp_path):
    (tmp_path / "demo-test.json").write_text(json.dumps(demo_report()))
    table = tables.render("demo-test.json", "pipeline", results=tmp_path).splitlines()
    assert table[0] == ("| reasoner | questions | EM [95% CI] | F1 [95% CI] | format errors | "
                        "searches | turns cut by max_new_tokens |")
    assert table[2] == ("| after the SFT warm-up | 24 | 0.250 [0.100, 0.400] | "
                        "0.300 [0.125, 0.500] | 0.08 | 1.50 | 0.25 |")
    assert table[3].startswith("| after joint RL | 24 | 0.500 [0.100, 0.400] |")
    assert table[3].endswith("| not counted |")  # a report from before turns were counted
    assert len(table) == 6  # header, rule, two stages, a blank line, the source line


def test_the_readmes_blocks_are_made_again_from_their_files(tables, tmp_path):
    (tmp_path / "demo-test.json").write_text(json.dumps(demo_report()))
    stale = ("Intro.\n<!-- results: demo-test.json pipeline -->\n| old | table |\n"
             "<!-- /results -->\nOutro.\n")
    fresh = tables.refresh(stale, tmp_path)
    assert "| old | table |" not in fresh and "| after joint RL | 24 |" in fresh
    assert fresh.startswith("Intro.\n<!-- results: demo-test.json pipeline -->\n| reasoner |")
    assert fresh.endswith("<!-- /results -->\nOutro.\n")
    assert tables.refresh(fresh, tmp_path) == fresh  # nothing left to change


def test_the_readme_is_as_its_results_files_say(tables):
    """The README's generated blocks (the demo's table) are what their results files give:
    `python bench/results_tables.py --readme` after a benchmark writes them."""
    text = tables.README.read_text()
    assert tables.BLOCK.search(text), "the README has no generated block"
    assert tables.refresh(text) == text


def test_a_partial_rex_record_lists_its_arms_against_their_starts_and_no_test_yet(tables):
    diff = {"diff": 0.25, "ci95": [0.0, 0.5], "n": 44}
    report = {"test": None, "arms_missing": ["rex-seed0", "grpo-seed1"],
              "start_digests": {"grpo-seed0": "ae5f3a65be9a0380"},
              "arms": {"grpo-seed0": {"finished": "2026-12-04 10:00 UTC", "cpu": "Xeon"}},
              "vs_own_start": {"grpo-seed0": {"f1_chained": diff, "f1_multi_hop": diff,
                                              "searches_chained": diff}}}
    header, rows = tables.rex_vs_start_table(report)
    assert rows == [["grpo-seed0", "ae5f3a65", "+0.250 [+0.000, +0.500]",
                     "+0.250 [+0.000, +0.500]", "+0.250 [+0.000, +0.500]",
                     "2026-12-04 10:00 UTC", "Xeon"]]
    _, [waiting] = tables.rex_test_table(report)
    assert waiting == ["not yet: arms still to run", "2", "rex-seed0, grpo-seed1"]


def test_the_rex_probes_tables_give_outcomes_per_kind_and_the_turns_probes_had_left(
        tables, tmp_path):
    outcome = {"probes": 4.0, "full_marks": 1.0, "probe_new_searches": 0.5,
               "probe_same_answer": 0.25, "probe_unanswered": 0.25, "probe_f1": 0.3,
               "probe_origin_f1": 0.125}
    (tmp_path / "rex_probes-toy.json").write_text(json.dumps(
        {"outcomes": {"all": outcome}, "turns_left": {"1": 3, "0": 1}}))
    outcomes = tables.render("rex_probes-toy.json", results=tmp_path).splitlines()
    assert outcomes[2] == "| all | 4 | 1 | 0.50 | 0.25 | 0.25 | 0.30 | 0.12 |"
    turns = tables.render("rex_probes-toy.json", "turns_left", results=tmp_path).splitlines()
    assert turns[2:4] == ["| 0 | 1 | 0.25 |", "| 1 | 3 | 0.75 |"]  # 1 of 4, 3 of 4
