"""The learning protocols' records under ``bench/learning/``: each arm's record written whole,
the declared tests on seed means against each arm's own start (hand-worked tables), the
aggregates that grow arm by arm, the judge's slice sets kept across sessions and the
scoreboard."""

from __future__ import annotations

import json
import random
import sys

import pytest
from bench_paths import BENCH, REPO, on_path


def kinded_rows(f1s, searches=(1, 1, 1, 1)):
    """Four scored rows, one of each question kind, with the columns an arm record keeps."""
    kinds = ["single", "two-hop", "three-hop", "comparison"]
    return [{"id": f"q{i}", "kind": k, "f1": f, "em": f, "n_searches": n, "cut_turns": 0,
             "format_errors": 0, "prediction": "x"}
            for i, (k, f, n) in enumerate(zip(kinds, f1s, searches))]


def test_the_rex_rag_test_pairs_seed_means_each_arm_with_its_own_start(monkeypatch):
    on_path(monkeypatch, "learning")
    import bench_rex_rag

    start = kinded_rows([0.5, 0.0, 0.0, 0.0])
    table = {"rex-seed0": kinded_rows([0.0, 1.0, 0.5, 0.0], [2, 2, 3, 2]),
             "rex-seed1": kinded_rows([0.0, 0.0, 0.5, 1.0], [2, 2, 1, 2]),
             "grpo-seed0": kinded_rows([1.0, 0.0, 0.0, 0.0]),
             "grpo-seed1": kinded_rows([1.0, 0.0, 0.5, 0.0])}
    starts = {name: start for name in table}  # grpo seed 1 was trained from another rebuild:
    starts["grpo-seed1"] = kinded_rows([0.5, 0.0, 0.5, 0.0], [1, 2, 1, 1])
    test = bench_rex_rag.the_test(table, starts, [0, 1])
    assert (test["multi_hop_questions"], test["chained_questions"]) == (3, 2)
    # seed means on the multi-hop questions: rex [½, ½, ½], grpo [0, ¼, 0] → mean diff 5/12
    assert test["rex-grpo_f1_multi_hop"]["diff"] == pytest.approx(5 / 12)
    assert test["rex-grpo_f1_all"]["diff"] == pytest.approx((5 / 12 * 3 - 1) / 4)
    assert test["per_seed_rex-grpo_f1_multi_hop"]["1"]["diff"] == pytest.approx((0.0 + 0.0 + 1.0) / 3)
    # gains on the multi-hop questions: rex [½, ½, ½] − its start [0, 0, 0]; grpo [0, ¼, 0] −
    # its starts' mean [0, ¼, 0] → ½ − 0
    assert test["rex-grpo_gain_f1_multi_hop"]["diff"] == pytest.approx(0.5)
    # chained (two-, three-hop): grpo [0, ¼] against its own starts' mean [0, ¼] → 0
    assert test["grpo-start_f1_chained"]["diff"] == pytest.approx(0.0)
    assert test["rex-start_f1_chained"]["diff"] == pytest.approx(0.5)
    # searches on chained questions: rex [2, 2] − [1, 1]; grpo [1, 1] − [1½, 1] → −¼
    assert test["rex-start_searches_chained"]["diff"] == pytest.approx(1.0)
    assert test["grpo-start_searches_chained"]["diff"] == pytest.approx(-0.25)
    assert test["rex-start_searches_multi_hop"]["diff"] == pytest.approx(1.0)


def test_the_rex_rag_test_pairs_the_ur2_arms_one_seed_with_its_start_and_with_grpo(monkeypatch):
    on_path(monkeypatch, "learning")
    import bench_rex_rag

    start = kinded_rows([0.5, 0.0, 0.0, 0.0])
    table = {"rex-seed0": kinded_rows([0.0, 1.0, 0.5, 0.0]),
             "rex-seed1": kinded_rows([0.0, 0.0, 0.5, 1.0]),
             "grpo-seed0": kinded_rows([1.0, 0.0, 0.0, 0.0]),
             "grpo-seed1": kinded_rows([1.0, 0.0, 0.5, 0.0])}
    starts = {name: start for name in table}
    starts["grpo-seed1"] = kinded_rows([0.5, 0.0, 0.5, 0.0])
    assert "ur2-grpo_f1_multi_hop" not in bench_rex_rag.the_test(table, starts, [0, 1])
    table["ur2-seed0"] = kinded_rows([1.0, 1.0, 0.0, 0.5], [1, 3, 3, 1])  # seed 0 only
    starts["ur2-seed0"] = start
    test = bench_rex_rag.the_test(table, starts, [0, 1])
    # multi-hop: ur2 [1, 0, ½] against grpo's seed means [0, ¼, 0] → (1 − ¼ + ½) / 3
    assert test["ur2-grpo_f1_multi_hop"]["diff"] == pytest.approx(5 / 12)
    # gains: ur2 [1, 0, ½] − [0, 0, 0]; grpo [0, ¼, 0] − its starts' mean [0, ¼, 0]
    assert test["ur2-grpo_gain_f1_multi_hop"]["diff"] == pytest.approx(0.5)
    assert test["ur2-start_f1_chained"]["diff"] == pytest.approx(0.5)  # [1, 0] − [0, 0]
    assert test["ur2-start_searches_chained"]["diff"] == pytest.approx(2.0)  # [3, 3] − [1, 1]
    assert test["ur2-start_searches_multi_hop"]["diff"] == pytest.approx(4 / 3)
    assert test["rex-grpo_f1_multi_hop"]["diff"] == pytest.approx(5 / 12)  # unchanged


def test_the_ur2_arm_takes_the_shared_start_and_budget_and_must_match_the_world(
        tmp_path, monkeypatch, capsys):
    on_path(monkeypatch, "learning")
    import argparse

    import bench_rex_rag

    from advrag.config import load_config
    from advrag.recipes.grpo import GrpoConfig
    from advrag.recipes.ur2 import UR2Config

    base = load_config(REPO / "configs/rex-rag.yaml", GrpoConfig)
    ur2 = load_config(REPO / "configs/ur2-raw-docs.yaml", UR2Config)
    assert bench_rex_rag.settings_differ(ur2, base) == []  # the Makefile's pair of configs
    arm = bench_rex_rag.ur2_arm_config(ur2, tmp_path / "start", 2, 48, 4, tmp_path / "cache")
    assert (arm.model, arm.warmup, arm.steps, arm.questions_per_step) == (
        str(tmp_path / "start"), None, 48, 4)
    assert (arm.optim.seed, arm.optim.lr, arm.optim.advantage) == (2, 5e-5, "reinforce_pp")
    assert arm.checkpoint_dir == tmp_path / "cache" / "ur2-seed2"
    assert arm.curate.out_dir.parent == tmp_path / "cache" and arm.curate.k == 4
    assert (arm.checkpoint_every, arm.evaluate, arm.summary.summarise) == (8, None, False)
    two_turns = ur2.model_copy(update={"max_turns": 2})
    assert bench_rex_rag.settings_differ(two_turns, base) == ["max_turns: 2 against 4"]
    parser = argparse.ArgumentParser()
    args = argparse.Namespace(start=None, ur2_config=str(REPO / "configs/ur2-raw-docs.yaml"),
                              config="configs/rex-rag.yaml")
    with pytest.raises(SystemExit):
        bench_rex_rag.check_ur2_config(parser, args, base)
    assert "give --start" in capsys.readouterr().err


def test_an_arm_record_is_written_whole_and_a_start_is_scored_once(tmp_path, monkeypatch):
    on_path(monkeypatch, "learning")
    from arm_records import ArmRecords, model_digest

    model = tmp_path / "model"
    model.mkdir()
    (model / "b.safetensors").write_bytes(b"second")
    (model / "a.safetensors").write_bytes(b"first")
    (model / "config.json").write_text("{}")  # not a weight file: not in the digest
    import hashlib
    assert model_digest(model) == hashlib.sha256(b"firstsecond").hexdigest()[:16]
    (model / "b.safetensors").write_bytes(b"secone")
    assert model_digest(model) != hashlib.sha256(b"firstsecond").hexdigest()[:16]
    with pytest.raises(SystemExit, match="no \\*.safetensors"):
        model_digest(tmp_path)
    records, scored = ArmRecords(tmp_path / "records"), []
    assert records.load("grpo-seed0") is None
    for _ in range(2):
        rows = records.start_rows("d1", lambda: scored.append(1) or [{"f1": 1.0}])
    assert rows == [{"f1": 1.0}] and scored == [1]
    records.write("grpo-seed0", {"rows": []})
    assert records.load("grpo-seed0")["finished"].endswith("UTC")
    assert sorted(p.name for p in records.directory.iterdir()) == ["grpo-seed0.json",
                                                                   "start-d1.json"]


def test_an_arm_record_keeps_what_its_policy_searched_and_rates_its_hops(monkeypatch):
    """A scored row's queries, passage ids and hop flags are kept (a transcript is not); per
    kind, hop recall and chaining rate come from the flags: 3 of 4 hops, 1 of 2 bridges."""
    on_path(monkeypatch, "learning")
    import bench_rex_rag

    base = {"em": 1.0, "f1": 1.0, "format_errors": 0, "n_searches": 2, "prediction": "x",
            "cut_turns": 0, "kind": "two-hop", "transcript": "…"}
    rows = [base | {"id": "q1", "queries": ["a", "b"], "retrieved_ids": [["p1"], ["p9"]],
                    "hops_retrieved": [True, False], "chained": [False]},
            base | {"id": "q2", "queries": ["c", "d x"], "retrieved_ids": [["p2"], ["p3"]],
                    "hops_retrieved": [True, True], "chained": [True]}]
    kept = bench_rex_rag.kept_columns(rows)
    assert kept[0]["queries"] == ["a", "b"] and kept[0]["hops_retrieved"] == [True, False]
    assert "transcript" not in kept[0]
    by_kind = bench_rex_rag.summary(kept)["by_kind"]["two-hop"]
    assert by_kind["hop_recall"] == 0.75 and by_kind["chaining_rate"] == 0.5
    older = [{k: v for k, v in r.items() if k not in bench_rex_rag.BEHAVIOUR_KEYS} for r in kept]
    assert "hop_recall" not in bench_rex_rag.summary(older)["by_kind"]["two-hop"]


def test_the_rex_rag_record_grows_arm_by_arm_and_tests_once_all_have_run(tmp_path, monkeypatch):
    on_path(monkeypatch, "learning")
    import argparse
    import types

    import bench_rex_rag
    from arm_records import ArmRecords

    records = ArmRecords(tmp_path / "rex-rag-chaining")
    records.start_rows("aaaa", lambda: kinded_rows([0.5, 0.0, 0.0, 0.0]))
    training = {"run_id": "r", "model_dir": "m", "steps_run": 2, "wall_s": 1.0,
                "curves": {key: [0.1, 0.2] for key in bench_rex_rag.CURVES}}

    def finish(name, digest, f1s):
        records.write(name, {"start_digest": digest, "training": training, "cpu": "test CPU",
                             "rows": kinded_rows(f1s)})

    args = argparse.Namespace(config="c.yaml", seeds=[0], steps=2, start=None, heldout=4,
                              out=tmp_path / "rex-rag-chaining.json")
    base = types.SimpleNamespace(questions_per_step=1, group_size=2, max_turns=4)
    names = ["grpo-seed0", "rex-seed0"]
    finish("grpo-seed0", "aaaa", [0.5, 1.0, 0.0, 0.0])
    bench_rex_rag.write_aggregate(args, base, records, names)
    report = json.loads(args.out.read_text())
    assert report["test"] is None and report["arms_missing"] == ["rex-seed0"]
    assert report["vs_own_start"]["grpo-seed0"]["f1_chained"]["diff"] == pytest.approx(0.5)
    assert set(report["heldout_results"]) == {"start", "grpo-seed0"}
    records.start_rows("bbbb", lambda: kinded_rows([0.5, 1.0, 1.0, 0.0]))
    finish("rex-seed0", "bbbb", [0.5, 1.0, 1.0, 0.0])  # from another rebuild of the start
    bench_rex_rag.write_aggregate(args, base, records, names)
    report = json.loads(args.out.read_text())
    assert report["arms_missing"] == [] and report["test"]["rex-grpo_f1_all"]["diff"] == 0.25
    assert report["test"]["rex-start_f1_chained"]["diff"] == pytest.approx(0.0)
    policies = {json.loads(line)["policy"]
                for line in (tmp_path / "rex-rag-chaining_rows.jsonl").read_text().splitlines()}
    assert policies == {"start-aaaa", "start-bbbb", "grpo-seed0", "rex-seed0"}
    assert (tmp_path / "rex-rag-chaining_curves.png").stat().st_size > 0
    assert report["arms"]["rex-seed0"]["probes_by_kind"] == {}  # curves without kinds
    names.append("ur2-seed0")  # the UR² arm: the GRPO/REX-RAG test does not wait for it
    bench_rex_rag.write_aggregate(args, base, records, names)
    report = json.loads(args.out.read_text())
    assert report["arms_missing"] == ["ur2-seed0"] and "ur2-grpo_f1_multi_hop" not in report["test"]
    training["curves"] = {key: [0.1, 0.2] for key in bench_rex_rag.UR2_CURVES}
    records.write("ur2-seed0", {"start_digest": "aaaa", "training": training, "cpu": "test CPU",
                                "curation": {"scores": {"n": 8}}, "rows": kinded_rows([1.0] * 4)})
    bench_rex_rag.write_aggregate(args, base, records, names)
    report = json.loads(args.out.read_text())
    assert report["arms"]["ur2-seed0"]["curation"] == {"scores": {"n": 8}}
    # multi-hop: ur2 [1, 1, 1] against grpo [1, 0, 0]
    assert report["test"]["ur2-grpo_f1_multi_hop"]["diff"] == pytest.approx(2 / 3)


def test_an_arms_probes_are_summed_per_question_kind(monkeypatch):
    on_path(monkeypatch, "learning")
    import bench_rex_rag

    # two-hop probes at three updates (2, 1, 1 opened; 1, 0, 1 right), three-hop at one
    run_curves = {"reward_mean": [0.5, 0.25, 0.5],
                  "rex/probes_opened/two-hop": [2.0, 1.0, 1.0],
                  "rex/probes_correct/two-hop": [1.0, 0.0, 1.0],
                  "rex/probes_opened/three-hop": [3.0], "rex/probes_correct/three-hop": [0.0]}
    assert bench_rex_rag.probe_totals(run_curves) == {
        "two-hop": {"opened": 4.0, "correct": 2.0, "accuracy": 0.5},
        "three-hop": {"opened": 3.0, "correct": 0.0, "accuracy": 0.0}}


def test_an_arms_probe_outcomes_weigh_each_update_by_the_probes_it_opened(tmp_path, monkeypatch):
    on_path(monkeypatch, "learning")
    import bench_rex_rag

    from advrag.tasks import tracking

    uri = tracking.default_uri(tmp_path / "ml")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    tracking.configure(uri)
    with tracking.tracked_run("bench-rex-rag", "r") as run_id:
        for step, opened in enumerate([3.0, 0.0, 1.0]):
            tracking.log_metrics(run_id, {"rex/probes_opened": opened}, step=step)
        # outcomes at the updates that opened probes only: 3 probes, then 1
        for step, value in ((0, 1.0), (2, 0.0)):
            tracking.log_metrics(run_id, {key: value for key in bench_rex_rag.PROBE_OUTCOMES},
                                 step=step)
    # (1.0·3 + 0.0·1) / 4 probes
    assert bench_rex_rag.probe_outcomes(run_id) == {
        key: 0.75 for key in bench_rex_rag.PROBE_OUTCOMES}
    with tracking.tracked_run("bench-rex-rag", "g") as grpo:
        tracking.log_metrics(grpo, {"reward_mean": 0.5})
    assert bench_rex_rag.probe_outcomes(grpo) == {}


def test_the_adversarial_test_pairs_each_arm_with_grpo_on_the_same_questions(monkeypatch):
    on_path(monkeypatch, "learning")
    import bench_adversarial

    table = {"grpo-seed0": kinded_rows([1.0, 0.0, 0.0, 0.0]),
             "grpo-seed1": kinded_rows([1.0, 0.0, 0.5, 0.0]),
             "gar-seed0": kinded_rows([0.0, 1.0, 0.5, 0.0]),
             "gar-seed1": kinded_rows([0.0, 0.0, 0.5, 1.0]),
             "arr-seed0": kinded_rows([1.0, 0.0, 0.0, 0.0]),
             "arr-seed1": kinded_rows([1.0, 0.0, 0.5, 0.0])}
    test = bench_adversarial.the_test(table, [0, 1])
    # multi-hop seed means: gar [½, ½, ½], grpo [0, ¼, 0] → 5/12; arr = grpo → 0
    assert test["multi_hop_questions"] == 3
    assert test["gar-grpo_f1_multi_hop"]["diff"] == pytest.approx(5 / 12)
    assert test["arr-grpo_f1_multi_hop"]["diff"] == pytest.approx(0.0)
    assert test["arr-grpo_f1_all"]["n"] == 4


def test_the_adversarial_record_waits_for_its_grpo_arms_before_the_test(tmp_path, monkeypatch):
    on_path(monkeypatch, "learning")
    import argparse

    import bench_adversarial
    from arm_records import ArmRecords

    grpo, mine = ArmRecords(tmp_path / "rex-rag-chaining"), ArmRecords(tmp_path / "adv")
    training = {"run_id": "r", "steps_run": 1, "wall_s": 1.0, "curves": {}}
    for name, f1s in (("gar-seed0", [0.0, 1.0, 0.5, 0.0]), ("arr-seed0", [1.0, 0.0, 0.0, 0.0])):
        mine.write(name, {"start_digest": "d", "training": training, "cpu": "test CPU",
                          "rows": kinded_rows(f1s)} | (
                              {"verifier": {"verifier/flagged_wrong": 0.5}} if "arr" in name else {}))
    args = argparse.Namespace(start=tmp_path, judge=tmp_path, seeds=[0], steps=1,
                              questions_per_step=1, heldout=4, grpo_records=grpo.directory,
                              out=tmp_path / "adversarial-chaining.json")
    names = ["gar-seed0", "arr-seed0"]
    bench_adversarial.write_aggregate(args, mine, names)
    report = json.loads(args.out.read_text())
    assert report["test"] is None and report["arms_missing"] == ["grpo-seed0"]
    assert report["verifier"] == {"arr-seed0": {"verifier/flagged_wrong": 0.5}}
    grpo.write("grpo-seed0", {"start_digest": "d", "rows": kinded_rows([1.0, 0.0, 0.0, 0.0])})
    grpo.write("start-d", {"rows": kinded_rows([0.0, 0.0, 0.0, 0.0])})
    bench_adversarial.write_aggregate(args, mine, names)
    report = json.loads(args.out.read_text())
    assert report["arms_missing"] == []
    assert report["test"]["gar-grpo_f1_multi_hop"]["diff"] == pytest.approx(0.5)
    # the rows beside it carry the start's, for the scoreboard's "− start"
    policies = [json.loads(line)["policy"] for line in
                (tmp_path / "adversarial-chaining_rows.jsonl").read_text().splitlines()]
    assert sorted(set(policies)) == ["arr-seed0", "gar-seed0", "grpo-seed0", "start"]


def test_a_committed_rejection_set_is_read_back_instead_of_sampled(tmp_path, monkeypatch):
    on_path(monkeypatch, "learning")
    import gzip

    import bench_chaining_warmup as warmup

    kept = [[{"text": "<|im_start|>user\nQ?", "source": "prompt"},
             {"text": "<answer> Varhir </answer>", "source": "policy"}]]
    path = tmp_path / "rs4-kept.json.gz"
    warmup.write_text(path, json.dumps(kept))  # arm_records' helper
    assert json.loads(gzip.decompress(path.read_bytes())) == kept
    first = path.read_bytes()
    warmup.write_text(path, json.dumps(kept))
    assert path.read_bytes() == first  # no time stamp in the gzip header: the same bytes
    # no config and no model: a set that is there is read, never sampled
    [trajectory] = warmup.rejection_samples(None, "no-such-model", 4, 200, path)
    assert [(s.text, s.source) for s in trajectory.segments] == [
        ("<|im_start|>user\nQ?", "prompt"), ("<answer> Varhir </answer>", "policy")]


def judge_run(tmp_path, weights: bytes, **overrides):
    """bench_judge's arguments and config for a start whose weights are ``weights``."""
    import argparse

    import bench_judge

    start = tmp_path / "start"
    start.mkdir(exist_ok=True)
    (start / "model.safetensors").write_bytes(weights)
    (start / "config.json").write_text("{}")
    args = argparse.Namespace(**{
        "start": str(start), "archive": tmp_path / "results" / "judge-pipeline", "name": "p",
        "questions": None, "heldout_fraction": 0.5, "rollouts": 2, "epochs": 4, **overrides})
    config = bench_judge.judge_config(args).model_copy(update={
        "out_dir": tmp_path / "slices", "checkpoint_dir": tmp_path / "judge"})
    return args, config, bench_judge.made_with(config, str(start))


def test_a_judge_slice_set_is_committed_once_built_and_unpacked_by_a_later_session(
        tmp_path, monkeypatch):
    on_path(monkeypatch, "learning")
    import hashlib
    import shutil

    import bench_judge

    from advrag.tasks.discriminator import rollout_cache

    args, config, made = judge_run(tmp_path, b"weights")
    digest = hashlib.sha256(b"weights").hexdigest()[:16]
    # a set this session built (as a killed run leaves it), from 3 rollouts of this start
    rows = '{"id": "q1/demonstration/0", "sound": true}\n{"id": "q1/corrupted/0", "sound": false}\n'
    config.out_dir.mkdir()
    (config.out_dir / "slices.jsonl").write_text(rows)
    (config.out_dir / "made-with.json").write_text(json.dumps(made) + "\n")
    cache = rollout_cache(config, args.start)
    cache.parent.mkdir(parents=True)
    cache.write_text('{"r": 1}\n{"r": 2}\n{"r": 3}\n')
    segments = [{"start": digest, "rollouts": 3}]
    assert bench_judge.slice_set(config, args) == (config.out_dir / "slices.jsonl", segments)
    header, _, body = bench_judge.read_text(args.archive / "slices.jsonl.gz").partition("\n")
    assert json.loads(header) == {"made_with": made, "rollouts_from": segments}
    assert body == rows
    # a later session: no .cache, another start (its CPU's rebuild); the set is unpacked verbatim
    shutil.rmtree(config.out_dir)
    shutil.rmtree(config.checkpoint_dir)
    args, config, made = judge_run(tmp_path, b"rebuilt elsewhere")
    assert bench_judge.slice_set(config, args) == (config.out_dir / "slices.jsonl", segments)
    assert (config.out_dir / "slices.jsonl").read_text() == rows
    assert json.loads((config.out_dir / "made-with.json").read_text()) == made
    # other settings than the committed set's: refused, naming both
    args, config, _ = judge_run(tmp_path, b"rebuilt elsewhere", rollouts=4)
    with pytest.raises(SystemExit, match="rollouts.: 2.*rollouts.: 4.*another --archive"):
        bench_judge.slice_set(config, args)


def test_the_committed_judge_slice_set_matches_make_bench_judge_s_settings(monkeypatch):
    """``make bench-judge``'s arguments still make the settings the committed set was made with
    (so a later session unpacks it), whatever SFT settings (``dev_fraction``) change."""
    on_path(monkeypatch, "learning")
    import argparse

    import bench_judge

    header = bench_judge.read_text(BENCH / "results/judge-pipeline/slices.jsonl.gz"
                                   ).partition("\n")[0]
    args = argparse.Namespace(start=".cache/advrag/chaining/full-3hop/rs4", name="pipeline",
                              questions=None, heldout_fraction=0.5, rollouts=2, epochs=4)
    config = bench_judge.judge_config(args)
    assert json.loads(header)["made_with"] == bench_judge.made_with(config, args.start)
    other = config.model_copy(update={"dev_fraction": 0.5, "patience": 2})
    assert bench_judge.made_with(other, args.start) == bench_judge.made_with(config, args.start)


def test_judge_rollouts_are_packed_as_sampled_and_a_later_session_samples_on_after_them(
        tmp_path, monkeypatch):
    on_path(monkeypatch, "learning")
    import bench_judge

    from advrag.tasks.discriminator import rollout_cache

    args, config, made = judge_run(tmp_path, b"first cpu")
    cache, archive = rollout_cache(config, args.start), args.archive / "rollouts.jsonl.gz"
    cache.parent.mkdir(parents=True)
    # a session killed while sampling: what its cache held when it stopped is packed,
    # a line being appended left out
    with pytest.raises(KeyboardInterrupt), \
            bench_judge.packed_rollouts(cache, archive, made, [], "d1", every_s=3600):
        cache.write_text('{"r": 1}\n{"r": 2}\n{"r": 3')
        raise KeyboardInterrupt
    header, _, rows = bench_judge.read_text(archive).partition("\n")
    assert json.loads(header) == {"made_with": made, "segments": [{"start": "d1", "rollouts": 2}]}
    assert rows == '{"r": 1}\n{"r": 2}\n'
    # the next session, on another start: the committed rollouts go into its own cache first
    args, config, made = judge_run(tmp_path, b"second cpu")
    cache = rollout_cache(config, args.start)
    assert not cache.exists()
    carried = bench_judge.carried_rollouts(archive, cache, made)
    assert carried == [{"start": "d1", "rollouts": 2}] and cache.read_text() == rows
    import time
    with bench_judge.packed_rollouts(cache, archive, made, carried, "d2", every_s=0.01):
        cache.write_text(rows + '{"r": 3}\n{"r": 4}\n{"r": 5}\n')
        deadline = time.monotonic() + 30
        while bench_judge.read_text(archive).count("\n") < 6:  # packed while sampling goes on
            assert time.monotonic() < deadline, "the rollouts were not packed while sampling"
            time.sleep(0.01)
    header, _, rows = bench_judge.read_text(archive).partition("\n")
    assert json.loads(header)["segments"] == [{"start": "d1", "rollouts": 2},
                                              {"start": "d2", "rollouts": 3}]
    assert rows.count("\n") == 5
    # the same start again merges into its segment; nothing new adds nothing
    assert bench_judge.rollout_segments([{"start": "d2", "rollouts": 3}], "d2", 5) == [
        {"start": "d2", "rollouts": 5}]
    assert bench_judge.rollout_segments(carried, "d9", 2) == carried


def test_a_childs_cwd_is_where_it_runs(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    from reporting import child_json

    script = "import json, os; print(json.dumps({'cwd': os.getcwd()}))"
    assert child_json([sys.executable, "-c", script], cwd=tmp_path) == {"cwd": str(tmp_path)}


def test_the_gar_pipeline_seed_configs_change_only_seeds_and_names(tmp_path, monkeypatch):
    """The seed's pipeline, GAR and discriminator configs load, and differ from the project's
    in their seeds, experiment and registered names alone."""
    on_path(monkeypatch, "learning")
    import bench_gar_pipeline

    from advrag.config import PipelineConfig, load_config
    from advrag.recipes.gar import DiscriminatorSFTConfig, GarConfig

    configs = BENCH.parent / "configs"
    path = bench_gar_pipeline.seed_configs(configs / "pipeline.yaml", 3, tmp_path / "seed3")
    pipeline = load_config(path, PipelineConfig)
    base = load_config(configs / "pipeline.yaml", PipelineConfig)
    assert pipeline.data == base.data and pipeline.experiment == "advrag-bench-gar-pipeline"
    gar, base_gar = (load_config(p, GarConfig) for p in (pipeline.recipe, configs / "gar.yaml"))
    assert (gar.optim.seed, gar.warmup.sft.seed) == (3, 3)  # the discriminator's RL: optim's
    changed = {key for key, value in gar.model_dump().items()
               if value != base_gar.model_dump()[key]}
    assert changed == {"optim", "warmup", "registered_reasoner", "registered_discriminator"}
    judge = load_config(pipeline.discriminator, DiscriminatorSFTConfig)
    base_judge = load_config(configs / "discriminator.yaml", DiscriminatorSFTConfig)
    assert (judge.seed, judge.sft.seed) == (3, 3)
    assert judge.model_copy(update={"seed": 0, "sft": base_judge.sft,
                                    "registered_model": base_judge.registered_model}) == base_judge


def test_the_gar_pipeline_test_pairs_trained_and_warmup_seed_means(monkeypatch):
    on_path(monkeypatch, "learning")
    import bench_gar_pipeline

    def rows(f1s):
        kinds = ["single", "single", "two-hop", "comparison"]
        return [{"id": f"q{i}", "kind": k, "f1": f, "em": float(f == 1.0)}
                for i, (k, f) in enumerate(zip(kinds, f1s))]

    seeds = {0: {"rows": {"warmup": rows([0.5, 0.0, 0.0, 0.5]), "trained": rows([1.0, 0.0, 0.0, 0.5])}},
             1: {"rows": {"warmup": rows([0.0, 0.0, 0.0, 1.0]), "trained": rows([1.0, 1.0, 0.0, 0.0])}}}
    test = bench_gar_pipeline.the_test(seeds)
    # seed means: warm-up [¼, 0, 0, ¾], trained [1, ½, 0, ¼] → per question +¾, +½, 0, −½
    assert test["pooled"]["all"]["f1"]["diff"] == pytest.approx((0.75 + 0.5 + 0 - 0.5) / 4)
    assert test["pooled"]["single"]["trained_f1"] == pytest.approx(0.75)
    assert test["pooled"]["single"]["f1"]["diff"] == pytest.approx(0.625)
    assert test["pooled"]["all"]["em"]["diff"] == pytest.approx((1.0 + 0.5 + 0 - 0.5) / 4)
    assert test["per_seed"]["0"]["all"]["f1"]["diff"] == pytest.approx(0.5 / 4)
    seeds[1]["rows"]["warmup"][0]["id"] = "other"
    with pytest.raises(ValueError, match="different questions"):
        bench_gar_pipeline.the_test(seeds)


def test_the_scoreboard_pairs_each_seed_with_the_start_and_with_grpos_same_seed(
        tmp_path, monkeypatch):
    """Seeds averaged per question (hand-worked means below), so n counts questions."""
    on_path(monkeypatch, "learning")
    import scoreboard

    f1 = {"start": [0.0, 1.0], "grpo-seed0": [1.0, 1.0], "grpo-seed1": [0.0, 1.0],
          "rex-seed0": [1.0, 0.0], "rex-seed1": [1.0, 1.0]}
    kinds = ["two-hop", "single"]
    (tmp_path / "toy_rows.jsonl").write_text("".join(
        json.dumps({"policy": policy, "id": f"q{i}", "f1": value, "kind": kinds[i]}) + "\n"
        for policy, values in f1.items() for i, value in enumerate(values)))
    monkeypatch.setattr(scoreboard, "RESULTS", tmp_path)
    rows = scoreboard.record_rows({"record": "toy", "start": "start", "grpo": "grpo"})
    by = {(r["arm"], r["kind"]): r for r in rows}
    # grpo − start, per question over seeds: q0 ½ − 0, q1 1 − 1 → 1/4
    assert by["grpo", "all"]["vs_start"]["diff"] == pytest.approx(0.25)
    assert by["grpo", "all"]["n"] == 2
    assert by["grpo", "all"]["vs_grpo"] is None and by["start", "all"]["vs_start"] is None
    # rex − grpo, each seed with grpo's same seed: q0 1 − ½, q1 ½ − 1 → 0
    assert by["rex", "all"]["vs_grpo"]["diff"] == pytest.approx(0.0)
    # on the two-hop question alone: rex 1 − grpo ½ → ½; rex 1 − start 0 → 1
    assert by["rex", "two-hop"]["vs_grpo"]["diff"] == pytest.approx(0.5)
    assert by["rex", "two-hop"]["vs_start"]["diff"] == pytest.approx(1.0)
    assert (by["rex", "two-hop"]["n"], by["rex", "all"]["seeds"]) == (1, ["0", "1"])
    assert ("rex", "comparison") not in by  # a kind without questions gets no row
    # a record whose first arm has not written its rows yet is left off
    assert scoreboard.written(({"record": "toy"}, {"record": "running"})) == [{"record": "toy"}]


def test_arms_from_starts_of_different_digests_pair_each_seed_with_its_own_start(
        tmp_path, monkeypatch):
    """Two starts (rebuilt on two kinds of CPU): each seed against the start it began from, each
    start a row of its own, and the gains' difference beside the raw one (hand-worked below)."""
    on_path(monkeypatch, "learning")
    import scoreboard

    f1 = {"start-aa": [0.0, 1.0], "start-bb": [1.0, 1.0], "grpo-seed0": [1.0, 1.0],
          "rex-seed0": [0.5, 1.0], "rex-seed1": [1.0, 0.0]}
    (tmp_path / "toy_rows.jsonl").write_text("".join(
        json.dumps({"policy": policy, "id": f"q{i}", "f1": value, "kind": "two-hop"}) + "\n"
        for policy, values in f1.items() for i, value in enumerate(values)))
    (tmp_path / "toy.json").write_text(json.dumps({"start_digests": {
        "grpo-seed0": "aa", "rex-seed0": "aa", "rex-seed1": "bb"}}))
    monkeypatch.setattr(scoreboard, "RESULTS", tmp_path)
    by = {r["arm"]: r for r in scoreboard.record_rows(
        {"record": "toy", "start": "start", "grpo": "grpo"}) if r["kind"] == "all"}
    assert by["start-aa"]["vs_start"] is None and by["start-bb"]["vs_grpo"] is None
    # rex − own start per question over seeds: q0 (½ − 0 + 1 − 1)/2 = ¼, q1 (0 + −1)/2 = −½
    assert by["rex"]["vs_start"]["diff"] == pytest.approx((0.25 - 0.5) / 2)
    # grpo began at aa: q0 +1, q1 0 → ½
    assert by["grpo"]["vs_start"]["diff"] == pytest.approx(0.5)
    # rex − grpo raw (grpo's only seed for both): q0 ¾ − 1, q1 ½ − 1 → −⅜
    assert by["rex"]["vs_grpo"]["diff"] == pytest.approx(-0.375)
    # gains: rex's per question (¼, −½) − grpo's (1, 0) → (−¾ − ½)/2
    assert by["rex"]["gain_vs_grpo"]["diff"] == pytest.approx(-0.625)
    assert by["grpo"]["gain_vs_grpo"] is None


def test_a_second_seed_that_repeats_the_first_leaves_the_scoreboard_s_interval_as_it_was(
        tmp_path, monkeypatch):
    """The bootstrap resamples questions: a repeated seed adds no evidence, so its interval is
    the one seed's (pooling question-seed rows as if independent would narrow it)."""
    on_path(monkeypatch, "learning")
    import scoreboard

    start = [0.0, 1.0, 0.0, 0.5, 1.0, 0.0]
    trained = [1.0, 1.0, 0.0, 1.0, 0.5, 1.0]
    f1 = {"start": start, "once-seed0": trained, "twice-seed0": trained, "twice-seed1": trained}
    (tmp_path / "toy_rows.jsonl").write_text("".join(
        json.dumps({"policy": policy, "id": f"q{i}", "f1": value, "kind": "single"}) + "\n"
        for policy, values in f1.items() for i, value in enumerate(values)))
    monkeypatch.setattr(scoreboard, "RESULTS", tmp_path)
    by = {(r["arm"], r["kind"]): r for r in
          scoreboard.record_rows({"record": "toy", "start": "start", "grpo": None})}
    assert by["twice", "all"]["vs_start"] == by["once", "all"]["vs_start"]
    assert by["twice", "all"]["vs_start"]["n"] == 6


def test_the_judge_s_auroc_intervals_resample_questions_and_skip_one_label_sources(
        tmp_path, monkeypatch):
    on_path(monkeypatch, "learning")
    import bench_judge

    from advrag.tasks import tracking

    uri = tracking.default_uri(tmp_path / "ml")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    tracking.configure(uri)
    # every question's sound rollout slice is ranked above its unsound one: AUROC 1 whatever
    # questions a resample draws; corrupted slices are all unsound: no interval of their own
    rows = [{"id": f"q{q}/rollout/{i}", "sound": i == 0, "p_yes": [0.9, 0.3][i]}
            for q in range(5) for i in range(2)]
    rows += [{"id": f"q{q}/corrupted/0", "sound": False, "p_yes": 0.95 if q == 0 else None}
             for q in range(5)]
    with tracking.tracked_run("bench-judge", "j") as run_id:
        tracking.log_table(run_id, rows, "heldout/judgments.json")
    intervals = bench_judge.heldout_intervals(run_id)
    assert intervals["rollout"] == [1.0, 1.0] and "corrupted" not in intervals
    # all: the sound 0.9s beat the unsound 0.3s and the unread ones (0.5) but lose to q0's
    # corrupted 0.95: a resample without q0 scores 1, one with it less
    lo, hi = intervals["all"]
    assert lo < 1.0 and hi == 1.0


def test_the_adversarial_run_trains_the_chosen_arms_without_a_record(tmp_path, monkeypatch):
    on_path(monkeypatch, "learning")
    import bench_adversarial
    from arm_records import ArmRecords

    records = ArmRecords(tmp_path / "adv")
    records.write("gar-seed0", {"rows": []})
    names = ["gar-seed0", "arr-seed0", "gar-seed1", "arr-seed1"]
    assert bench_adversarial.to_train(names, ["gar"], records) == ["gar-seed1"]
    assert bench_adversarial.to_train(names, ["gar", "arr"], records) == [
        "arr-seed0", "gar-seed1", "arr-seed1"]


def test_the_adversarial_run_asks_for_the_judge_only_where_gar_trains(tmp_path, monkeypatch):
    on_path(monkeypatch, "learning")
    import argparse

    import bench_adversarial

    def flags(arms, arm=None):
        args = argparse.Namespace(start=tmp_path / "start", judge=tmp_path / "judge",
                                  arms=arms, arm=arm)
        return [flag for flag, _, _ in bench_adversarial.inputs_to_check(args)]

    assert flags(["arr"]) == ["--start"]
    assert flags(["gar", "arr"]) == ["--start", "--judge"]
    assert flags(["gar", "arr"], arm="arr") == ["--start"]  # the child trains one arm
    assert flags(["arr"], arm="gar") == ["--start", "--judge"]


def test_the_probe_study_takes_kinds_in_turn_and_counts_probes_per_kind(monkeypatch):
    on_path(monkeypatch, "learning")
    import bench_rex_probes

    from advrag.agents.probes import Prober
    from advrag.agents.types import ProbeOrigin, Trajectory
    from advrag.datasets.records import QARecord

    def record(i: int, kind: str, hops: int) -> QARecord:
        return QARecord(f"q{i}", "?", ["Tarn"], {"type": kind, "hops": hops})

    records = [record(0, "single", 1), record(1, "single", 1), record(2, "single", 1),
               record(3, "compositional", 2), record(4, "comparison", 2)]
    # single, two-hop, comparison in turn (no three-hop), then single again
    assert [r.id for r in bench_rex_probes.balanced(records, 4)] == ["q0", "q3", "q4", "q1"]
    assert len(bench_rex_probes.balanced(records, 9)) == 5  # the kinds ran out
    # two policy trajectories (answered at turns 2 and 4 of 4), a probe of each
    trajectories = [Trajectory(answer="Varhir", n_turns=2), Trajectory(answer="x", n_turns=4),
                    Trajectory(answer="Tarn", n_searches=1, probe=ProbeOrigin(0, 3, 0)),
                    Trajectory(answer="x", probe=ProbeOrigin(1, 3, 0))]
    answered = [records[0], records[3], records[0], records[3]]
    origins = Prober(["?"], 1.0, lambda i, a: True, random.Random(0))
    assert bench_rex_probes.turns_left(trajectories, 2, 4, origins) == {"0": 1, "2": 1}
    own = Prober(["?"], 1.0, lambda i, a: True, random.Random(0), probe_turns=2)
    assert bench_rex_probes.turns_left(trajectories, 2, 4, own) == {"2": 2}
    outcomes = bench_rex_probes.outcomes_by_kind(
        trajectories, answered, 2, lambda answer, r: answer == r.golden_answers[0])
    assert outcomes["single"] == {"probes": 1.0, "full_marks": 1.0, "probe_new_searches": 1.0,
                                  "probe_same_answer": 0.0, "probe_unanswered": 0.0,
                                  "probe_f1": 1.0, "probe_origin_f1": 0.0}
    assert outcomes["two-hop"]["probe_same_answer"] == 1.0 and outcomes["all"]["probes"] == 2.0
    assert "three-hop" not in outcomes


def test_the_arr_warmup_sizes_change_only_the_dialogue_count_and_the_best_dev_f1_is_chosen(
        tmp_path, monkeypatch):
    """Each size is configs/arr.yaml with the start, its own warm-up directory and that many
    dialogues; the chosen size has the highest dev F1, the smaller one on a tie."""
    on_path(monkeypatch, "learning")
    import bench_arr_warmup

    from advrag.config import load_config
    from advrag.recipes.arr import ArrConfig

    config = bench_arr_warmup.size_config(tmp_path / "start", 128, tmp_path / "cache")
    base = load_config(BENCH.parent / "configs/arr.yaml", ArrConfig)
    assert config.warmup.demonstrations == 128 and base.warmup.demonstrations == 32
    assert config.checkpoint_dir == tmp_path / "cache/dialogues-128"
    assert config.model_copy(update={"model": base.model, "checkpoint_dir": base.checkpoint_dir,
                                     "warmup": base.warmup}) == base

    planned = bench_arr_warmup.size_config(tmp_path / "start", 32, tmp_path / "cache", plan=True)
    assert planned.warmup_plan and planned.checkpoint_dir == tmp_path / "cache/dialogues-32-plan"

    def dev(f1):
        return {"dev": {"f1": {"mean": f1}}}

    assert bench_arr_warmup.chosen({"32": dev(0.3), "128": dev(0.5), "256": dev(0.4)}) == 128
    assert bench_arr_warmup.chosen({"256": dev(0.5), "32": dev(0.2), "128": dev(0.5)}) == 128
