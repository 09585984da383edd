"""Promotion tasks on a real MLflow registry (tmp SQLite store): aliases, reasons, rollback."""

from __future__ import annotations

import re

import pytest
import torch
from typer.testing import CliRunner

from advrag.config import PromotionSection
from advrag.registry.promotion import CHALLENGER, CHAMPION
from advrag.tasks import promotion as promo
from advrag.tasks import tracking

IDS = [f"q{i}" for i in range(40)]
SETTINGS = PromotionSection(n_boot=500)


@pytest.fixture(scope="module")
def module_store(tmp_path_factory):
    """One store for the module (creating a SQLite store costs seconds); a model per test."""
    uri = tracking.default_uri(tmp_path_factory.mktemp("ml"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        tracking.configure(uri)
        yield uri


@pytest.fixture()
def name(module_store, request) -> str:
    """A registered model of this test's own, in the module's store."""
    return re.sub(r"[^A-Za-z0-9-]", "-", request.node.name)[:60]


def bench_run(correct: set[int], status: str = "FINISHED", ids: list[str] = IDS) -> str:
    """A benchmark-shaped run: the per-question table the benchmark flow logs."""
    rows = [{"id": q, "question": f"Where is {q}?", "golden_answers": [f"a{q}"],
             "em": float(i in correct)} for i, q in enumerate(ids)]
    with tracking.tracked_run("bench", "b") as run_id:
        tracking.log_table(run_id, rows, "predictions/world/search_r1.json")
        tracking.log_table(run_id, [{**r, "em": 1.0} for r in rows], "predictions/world/cot.json")
    if status != "FINISHED":
        tracking.client().set_terminated(run_id, status)
    return run_id


def register(name: str, model_dir, correct: set[int] | None, *, status="FINISHED", gate=True) -> str:
    """A registered version with the tags the nightly flow writes."""
    with tracking.tracked_run("train", "t") as run_id:
        version = tracking.register_model_dir(run_id, model_dir, name)
    tags = {"data.version": "d1"}
    if gate:
        tags |= {"data.gate": "passed", "data.gate.version": "d1"}
    if correct is not None:
        tags["bench.run_id"] = bench_run(correct, status)
    tracking.set_model_version_tags(name, version, tags)
    return version


def gate(name: str, version: str | None = None, force: bool = False) -> dict[str, str]:
    """The promote flow's steps, run as plain functions (no rebenchmark needed here)."""
    candidate = promo.candidate_evidence.fn(name, version, "search_r1")
    champion = promo.champion_evidence.fn(name, "search_r1")
    assert not promo.needs_rebenchmark(candidate, champion)
    decision = promo.judge.fn(candidate, champion, SETTINGS, force)
    return promo.apply_decision.fn(name, candidate.version, decision)


@pytest.fixture()
def files(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "weights.txt").write_text("w")
    return out


def test_first_candidate_is_champion_and_an_equal_one_is_challenger(name, files):
    first = register(name, files, set(range(10)))
    tags = gate(name)
    assert tags["promotion.decision"] == CHAMPION and "no champion yet" in tags["promotion.reason"]
    assert tracking.alias_version(name, CHAMPION) == first
    assert tracking.alias_version(name, promo.PREVIOUS) is None

    second = register(name, files, set(range(10)))  # the same answers: EM diff 0, CI [0, 0]
    gate(name)
    recorded = tracking.model_version_tags(name, second)
    assert recorded["promotion.decision"] == CHALLENGER
    assert recorded["promotion.reason"].startswith("not clearly better: EM diff +0.000")
    assert recorded["promotion.compared_with"] == first and recorded["promotion.em_diff"] == "+0.0000"
    assert tracking.alias_version(name, CHAMPION) == first
    assert tracking.alias_version(name, CHALLENGER) == second


def test_clear_winner_takes_champion_and_remembers_the_previous_one(name, files):
    first = register(name, files, set(range(10)))
    gate(name, first)
    challenger = register(name, files, set(range(10)))
    gate(name, challenger)
    winner = register(name, files, set(range(30)))  # 30 vs 10 of 40, every paired diff >= 0
    tags = gate(name, winner)
    assert tags["promotion.decision"] == CHAMPION and tags["promotion.em_diff"] == "+0.5000"
    assert tags["promotion.previous_champion"] == first
    assert tracking.alias_version(name, CHAMPION) == winner
    assert tracking.alias_version(name, promo.PREVIOUS) == first
    assert tracking.alias_version(name, CHALLENGER) == challenger


@pytest.mark.parametrize("status", ["FAILED", "KILLED", "missing"])
def test_failed_or_missing_benchmark_never_promotes(name, files, status):
    first = register(name, files, set())
    gate(name, first)
    perfect = set(range(40))
    candidate = register(name, files, None if status == "missing" else perfect,
                         status="FINISHED" if status == "missing" else status)
    tags = gate(name, candidate)
    assert tags["promotion.decision"] == CHALLENGER
    assert tags["promotion.reason"] == "the candidate has no finished benchmark run"
    assert tracking.alias_version(name, CHAMPION) == first


def test_without_a_champion_a_failed_benchmark_still_does_not_promote(name, files):
    candidate = register(name, files, set(range(40)), status="FAILED")
    assert gate(name, candidate)["promotion.decision"] == CHALLENGER
    assert tracking.alias_version(name, CHAMPION) is None


def test_gate_not_passed_or_for_other_data_does_not_promote(name, files):
    no_gate = register(name, files, set(range(40)), gate=False)
    assert "data gate" in gate(name, no_gate)["promotion.reason"]
    other_data = register(name, files, set(range(40)))
    tracking.set_model_version_tags(name, other_data, {"data.gate.version": "d0"})
    assert gate(name, other_data)["promotion.decision"] == CHALLENGER


def test_force_promotes_and_says_so(name, files):
    first = register(name, files, set(range(10)))
    gate(name, first)
    forced = register(name, files, set(range(10)))
    tags = gate(name, forced, force=True)
    assert tags["promotion.reason"].startswith("forced by the user; the gate said: not clearly")
    assert tracking.alias_version(name, CHAMPION) == forced


def test_champion_on_other_questions_needs_a_rebenchmark(name, files):
    first = register(name, files, set(range(10)))
    gate(name, first)
    other = register(name, files, set(range(10)))
    tracking.set_model_version_tags(name, other, {"bench.run_id": bench_run(set(), ids=IDS[:20])})
    candidate = promo.candidate_evidence.fn(name, other, "search_r1")
    champion = promo.champion_evidence.fn(name, "search_r1")
    assert len(candidate.em) == 20 and len(champion.em) == 40
    assert promo.needs_rebenchmark(candidate, champion)
    fresh = promo.rescored.fn(champion, bench_run(set(), ids=IDS[:20]), "search_r1")
    assert not promo.needs_rebenchmark(candidate, fresh)


def test_same_ids_with_other_questions_do_not_match(name, files):
    run_id = bench_run(set())
    em = promo.per_question_em(run_id, "search_r1")
    assert len(em) == 40 and all(k.startswith("world/q") and "#" in k for k in em)
    with tracking.tracked_run("bench", "b") as other:
        tracking.log_table(other, [{"id": "q0", "question": "Something else?",
                                    "golden_answers": ["x"], "em": 0.0}],
                           "predictions/world/search_r1.json")
    assert not set(promo.per_question_em(other, "search_r1")) & set(em)


def test_rollback_walks_back_the_chain_and_errors_when_empty(name, files):
    with pytest.raises(LookupError, match="has no champion"):
        promo.rollback.fn(name)
    v1 = register(name, files, set(range(5)))
    gate(name, v1)
    with pytest.raises(LookupError, match="nothing to roll back to"):
        promo.rollback.fn(name)
    v2 = register(name, files, set(range(25)))
    gate(name, v2)
    v3 = register(name, files, set(range(40)))
    gate(name, v3)
    assert tracking.alias_version(name, promo.PREVIOUS) == v2
    assert promo.rollback.fn(name) == (v2, v3)
    assert tracking.alias_version(name, CHAMPION) == v2
    assert tracking.alias_version(name, promo.PREVIOUS) == v1
    assert "returned to v2" in tracking.model_version_tags(name, v3)["promotion.rolled_back"]
    assert promo.rollback.fn(name) == (v1, v2)
    assert tracking.alias_version(name, promo.PREVIOUS) is None


WRITES = ("set_model_version_tag", "set_registered_model_alias",
          "delete_registered_model_alias", "delete_model_version_tag")
"""The MLflow client's registry writes: one of them fails in the tests below."""


class FailOnce:
    """Makes the ``at``-th registry write (counted over ``WRITES``) raise, once."""

    def __init__(self, monkeypatch, at: int | None):
        from mlflow import MlflowClient

        self.at, self.count = at, 0
        for method in WRITES:
            monkeypatch.setattr(MlflowClient, method, self.wrap(getattr(MlflowClient, method)))

    def wrap(self, write):
        def counted(client, *args, **kwargs):
            self.count += 1
            if self.count == self.at:
                raise ConnectionError(f"registry write {self.at} failed")
            return write(client, *args, **kwargs)
        return counted


def promoted_state(name: str, files, monkeypatch, fail_at: int | None):
    """v1 champion, then v2 (clearly better) applied with write ``fail_at`` failing once and
    the task retried as Prefect would: the aliases, v2's tags (``decided_at`` aside), writes."""
    v1 = register(name, files, set(range(10)))
    gate(name, v1)
    v2 = register(name, files, set(range(30)))
    candidate = promo.candidate_evidence.fn(name, v2, "search_r1")
    decision = promo.judge.fn(candidate, promo.champion_evidence.fn(name, "search_r1"), SETTINGS)
    faults = FailOnce(monkeypatch, fail_at)
    try:
        promo.apply_decision.fn(name, v2, decision)
    except ConnectionError:
        promo.apply_decision.fn(name, v2, decision)  # the retry
    aliases = {a: tracking.alias_version(name, a) for a in (CHAMPION, promo.PREVIOUS, CHALLENGER)}
    tags = {k: v for k, v in tracking.model_version_tags(name, v2).items()
            if k.startswith("promotion.") and k != "promotion.decided_at"}
    monkeypatch.undo()
    return aliases, tags, faults.count


def test_a_retry_after_any_one_failed_write_ends_as_a_run_without_it(module_store, files,
                                                                     monkeypatch):
    want_aliases, want_tags, writes = promoted_state("promote-clean", files, monkeypatch, None)
    assert want_aliases == {CHAMPION: "2", promo.PREVIOUS: "1", CHALLENGER: None}
    assert want_tags["promotion.previous_champion"] == "1" and writes > 5
    for at in range(1, writes + 1):
        name = f"promote-fail-{at}"
        aliases, tags, _ = promoted_state(name, files, monkeypatch, at)
        assert (aliases, tags) == (want_aliases, want_tags), f"write {at} failed"
        assert promo.rollback.fn(name) == ("1", "2"), f"write {at} failed"


def test_a_promotion_holds_its_registered_model_against_another(name, files, tmp_path,
                                                                 monkeypatch):
    import subprocess
    import sys

    from advrag.common.locks import DirectoryBusy
    from advrag.flows import promotion as flow

    monkeypatch.chdir(tmp_path)
    register(name, files, set(range(10)))
    holder = subprocess.Popen(  # another promotion of the same model, under way
        [sys.executable, "-c", "import sys, time; from advrag.flows.promotion import "
         "registry_lock\nwith registry_lock(sys.argv[1]):\n print('held', flush=True); "
         "time.sleep(60)", name], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DirectoryBusy, match=f"the registered model .*{name} is in use"):
            flow.promotion_gate(name, SETTINGS)
        assert tracking.alias_version(name, CHAMPION) is None  # nothing was judged or moved
    finally:
        holder.kill()
        holder.wait(timeout=30)
    with flow.registry_lock(name):  # free again once the other has ended
        assert gate(name)["promotion.decision"] == CHAMPION


def nightly_config(tmp_path, reasoner: str, judge: str) -> str:
    """A nightly config whose GAR recipe registers ``reasoner`` and whose SFT judge is ``judge``."""
    (tmp_path / "gar.yaml").write_text(f"recipe: gar\nregistered_reasoner: {reasoner}\n")
    (tmp_path / "disc.yaml").write_text(f"registered_model: {judge}\n")
    config = tmp_path / "nightly.yaml"
    config.write_text(f"recipe: {tmp_path / 'gar.yaml'}\ndiscriminator: {tmp_path / 'disc.yaml'}\n")
    return str(config)


def test_rollback_command_reports_a_missing_champion(name, tmp_path):
    from advrag.cli import app

    config = nightly_config(tmp_path, name, f"{name}-judge")
    result = CliRunner().invoke(app, ["rollback", "--config", config])
    assert result.exit_code == 1
    assert f"model '{name}' has no champion: nothing to roll back" in result.output
    result = CliRunner().invoke(app, ["rollback", "--config", config, "--model", f"{name}-judge"])
    assert result.exit_code == 1
    assert f"model '{name}-judge' has no champion: nothing to roll back" in result.output
    result = CliRunner().invoke(app, ["promote", "--config", config, "--model", "nope"])
    assert result.exit_code == 2
    assert (f"model 'nope': not registered by this config — choose one of {name}, "
            f"advrag-gar-discriminator, {name}-judge") in result.output


def judged(name: str, model_dir, right: set[int], n: int = 20) -> str:
    """A registered discriminator whose SFT run judged ``n`` held-out slices, ``right`` of them
    correctly (the others: the wrong verdict, or none for every third)."""
    rows = [{"id": f"s{i}", "slice": f"slice {i}", "sound": i % 2 == 0,
             "verdict": (i % 2 == 0) if i in right else (None if i % 3 == 0 else i % 2 == 1),
             "p_yes": 0.5, "output": "…"} for i in range(n)]
    with tracking.tracked_run("disc", "d") as run_id:
        tracking.log_table(run_id, rows, "heldout/judgments.json")
        version = tracking.register_model_dir(run_id, model_dir, name)
    tracking.set_model_version_tags(name, version, {
        "run_id": run_id, "data.version": "d1", "data.gate": "passed", "data.gate.version": "d1"})
    return version


def test_a_discriminator_is_gated_on_its_held_out_verdicts(name, files, tmp_path):
    from advrag.flows.nightly import promote, rollback

    config = nightly_config(tmp_path, f"{name}-r", name)
    first = judged(name, files, set(range(10)))
    evidence = promo.candidate_evidence.fn(name, first, "search_r1", "judgments")
    assert sorted(evidence.em.values()) == [0.0] * 10 + [1.0] * 10  # malformed counts as wrong
    assert promote(config, model=name)["alias"] == CHAMPION
    better = judged(name, files, set(range(20)))  # 20 vs 10 of 20 right, no paired diff < 0
    tags = promote(config, model=name)
    assert tags["version"] == better and tags["alias"] == CHAMPION
    assert tags["promotion.reason"].startswith("beats the champion: verdict accuracy diff +0.500")
    assert rollback(config, model=name) == {"name": name, "restored": first, "demoted": better}
    assert tracking.alias_version(name, CHAMPION) == first


@pytest.mark.slow
def test_champion_alias_loads_the_promoted_weights(name, tmp_path, tiny_policy_dir):
    from advrag.models.loading import load_policy

    base = load_policy(str(tiny_policy_dir))
    with torch.no_grad():
        for p in base.model.parameters():
            p.add_(0.5)
    shifted = tmp_path / "shifted"
    base.model.save_pretrained(shifted)
    base.tokenizer.save_pretrained(shifted)
    v1 = register(name, tiny_policy_dir, set(range(5)))
    gate(name, v1)
    v2 = register(name, shifted, set(range(30)))
    gate(name, v2)

    def champion_weights(dst):
        loaded = load_policy(str(tracking.download_model(f"models:/{name}@champion", tmp_path / dst)))
        return list(loaded.model.parameters())

    def same(a, b):
        return all(torch.equal(x, y) for x, y in zip(a, b))

    original = list(load_policy(str(tiny_policy_dir)).model.parameters())
    trained = list(load_policy(str(shifted)).model.parameters())
    assert same(champion_weights("after-promotion"), trained)
    assert not same(trained, original)
    promo.rollback.fn(name)
    assert same(champion_weights("after-rollback"), original)
