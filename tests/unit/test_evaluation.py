"""Benchmark scoring: prediction reading, per-row metrics, summaries, table."""

from __future__ import annotations

from advrag.agents.types import Trajectory
from advrag.datasets.records import QARecord
from advrag.evaluation.methods import MethodOutput, read_prediction, untagged_answer
from advrag.evaluation.reports import results_markdown
from advrag.evaluation.scoring import score_rows, summarize


def test_untagged_answer_takes_the_last_line_without_tags():
    assert untagged_answer("<think>hmm</think>\nThe city was founded in 1405.\n") == \
        "The city was founded in 1405."
    assert untagged_answer("  \n<answer></answer>\n") is None
    assert untagged_answer("") is None


def test_read_prediction_prefers_the_tagged_answer():
    traj = Trajectory()
    traj.add("prompt text", "prompt")
    traj.add("I think Paris.", "policy")
    traj.add("<information>doc</information>", "env")
    assert read_prediction("Lyon", traj) == "Lyon"
    assert read_prediction(None, traj) == "I think Paris."
    assert read_prediction(None, Trajectory()) is None


def test_score_rows_and_summary_by_hand():
    records = [QARecord("a", "q1", ["Paris"]), QARecord("b", "q2", ["1405"])]
    outputs = [MethodOutput("paris", "t", retrieved_text="Paris is big", n_searches=2),
               MethodOutput("founded in 1405", "t", retrieved_text="nothing")]
    rows = score_rows(records, outputs)
    # row a: EM 1, F1 1; row b: EM 0, F1 = 2·(1/3·1)/(1/3+1) = 0.5, sub-EM 1
    assert [r["em"] for r in rows] == [1.0, 0.0]
    assert rows[1]["f1"] == 0.5 and rows[1]["sub_em"] == 1.0
    assert [r["retrieval_recall"] for r in rows] == [1.0, 0.0]
    summary = summarize(rows, seed=0)
    assert summary["em"] == 0.5 and summary["f1"] == 0.75 and summary["n_searches"] == 1.0
    assert 0.0 <= summary["em_lo"] <= 0.5 <= summary["em_hi"] <= 1.0
    table = results_markdown({("cot", "world"): summary})
    assert "| cot | world | 2 | 0.500 |" in table


def test_pipeline_table_reports_both_judge_readings_and_the_decision():
    from advrag.evaluation.reports import pipeline_markdown

    row = {"n": 32, "em": 0.125, "em_lo": 0.031, "em_hi": 0.25, "f1": 0.133, "f1_lo": 0.031,
           "f1_hi": 0.258, "format_errors": 0.03, "n_searches": 0.88}
    judge = {"metrics": {"n": 10, "accuracy": 0.0, "f1": 0.0, "malformed": 10.0,
                         "p_yes_accuracy": 0.7, "auroc": 0.781}}
    decision = {"version": "1", "alias": "champion", "promotion.reason": "no champion yet"}
    text = pipeline_markdown({"warmup": {"search_r1/world": row}}, judge, decision)
    assert "| warmup (search_r1/world) | 32 | 0.125 [0.031, 0.250] | 0.133 [0.031, 0.258] " \
           "| 0.03 | 0.88 |" in text
    assert ("held-out slices (10): written verdicts (what GAR's slice reward reads) accuracy "
            "0.000, F1 0.000, 10 malformed; P(yes) at its verdict (what R_d reads) accuracy "
            "0.700, AUROC 0.781.") in text
    assert text.endswith("Registry: v1 → champion — no champion yet")
    judge["metrics"]["auroc"] = float("nan")  # judgment_metrics: one label among the scored
    assert "AUROC n/a (the slices with a P(yes) hold one label)." in pipeline_markdown(
        {}, judge, decision)
    judge["metrics"]["auroc_all"] = 0.5  # every slice ranked, those without a verdict at 0.5
    assert ("AUROC n/a (the slices with a P(yes) hold one label) (0.500 over every slice, one "
            "with no verdict at 0.5).") in pipeline_markdown({}, judge, decision)


def test_pipeline_table_says_how_many_answers_rl_changed():
    from advrag.evaluation.reports import pipeline_markdown

    row = {"n": 24, "em": 0.25, "em_lo": 0.08, "em_hi": 0.42, "f1": 0.27, "f1_lo": 0.1,
           "f1_hi": 0.46, "format_errors": 0.5, "n_searches": 1.75}
    decision = {"version": "1", "alias": "champion"}
    trained = {"warmup": {"search_r1/world": row}, "trained": {"search_r1/world": row},
               "steps_run": 1, "changed_answers": {"search_r1/world": 0}}
    assert ("RL (1 update) changed 0 of the 24 greedy answers (search_r1/world) from the "
            "warm-up's: the trained row repeats the warm-up's.") in pipeline_markdown(
                trained, None, decision)
    trained |= {"steps_run": 16, "changed_answers": {"search_r1/world": 5}}
    assert ("RL (16 updates) changed 5 of the 24 greedy answers (search_r1/world) from the "
            "warm-up's.") in pipeline_markdown(trained, None, decision)
    trained["weight_change"] = 4.3226e-05  # the demo's one update, as flows/rl.py measures it
    assert ("from the warm-up's. RL moved the trained model's weights by 0.0043 % of the "
            "warm-up's (‖Δ‖ / ‖W‖).") in pipeline_markdown(trained, None, decision)
    assert "changed" not in pipeline_markdown({"trained": {"search_r1/world": row}}, None,
                                              decision)


def test_pipeline_table_prints_the_rl_reward_terms_per_update():
    from advrag.evaluation.reports import pipeline_markdown, reward_text

    decision = {"version": "2", "alias": "candidate"}
    one = {"R_m": [0.25], "R_s": [0.5], "R_d": [-1.5], "R_a": [0.75]}
    assert reward_text(one) == "Joint RL rewards, 1 update: R_m 0.250, R_s 0.500, R_d -1.500, " \
                               "R_a 0.750."
    assert reward_text(one) in pipeline_markdown({"rewards": one}, None, decision)
    three = {"R_m": [0.0, 0.5, 1.0], "R_d": [-2.0, -1.0, -1.5]}
    assert reward_text(three) == ("Joint RL rewards over 3 updates, first → last (mean): "
                                  "R_m 0.000 → 1.000 (0.500), R_d -2.000 → -1.500 (-1.500).")
    assert reward_text({"R_m": []}) == ""  # a resumed stage that made no update
    assert "Joint RL" not in pipeline_markdown({"rewards": {}}, None, decision)


def test_gar_curves_draw_the_four_reward_terms_and_skip_what_was_not_logged():
    from advrag.evaluation.reports import gar_curves

    history = [{"step": s, "reasoner/reward_mean": 0.5, "reasoner/answer_score": 0.25,
                "reasoner/slice_score": 0.5, "discriminator/R_d": -1.4,
                "discriminator/R_a": 0.5} for s in range(3)]
    reasoner, discriminator, judge = gar_curves(history).axes
    assert [line.get_label() for line in reasoner.lines] == ["reward", "R_m (answer)",
                                                             "R_s (slices)"]
    assert [line.get_label() for line in discriminator.lines] == ["R_d (GAN term)",
                                                                  "R_a (alignment)"]
    assert len(judge.lines) == 0  # no P(yes) or accuracy was logged


def test_the_benchmark_reports_how_arrs_verifier_treats_the_reasoners_answers():
    from advrag.datasets.records import QARecord
    from advrag.evaluation.methods import MethodOutput
    from advrag.evaluation.scoring import score_rows, summarize

    records = [QARecord(f"q{i}", "Who wrote Hamlet?", ["William Shakespeare"]) for i in range(4)]
    pairs = [("Marlowe", "William Shakespeare"),   # wrong, flagged and corrected
             ("Marlowe", "Marlowe"),               # wrong, kept: not flagged
             ("William Shakespeare", "William Shakespeare"),  # right, confirmed
             ("William Shakespeare", "Bacon")]     # right, overturned
    outputs = [MethodOutput(prediction=v, transcript="",
                            agent_answers=(("reasoner", r), ("verifier", v))) for r, v in pairs]
    rows = score_rows(records, outputs)
    assert rows[0]["agents"] == {"reasoner": {"answer": "Marlowe", "em": 0.0},
                                 "verifier": {"answer": "William Shakespeare", "em": 1.0}}
    summary = summarize(rows)
    assert {k: v for k, v in summary.items() if k.startswith("verifier/")} == {
        "verifier/n_wrong": 2.0, "verifier/n_right": 2.0, "verifier/flagged_wrong": 0.5,
        "verifier/corrected_wrong": 0.5, "verifier/confirmed_right": 0.5}
    one_agent = summarize(score_rows(records, [MethodOutput("x", "") for _ in records]))
    assert not any(k.startswith("verifier/") for k in one_agent)
