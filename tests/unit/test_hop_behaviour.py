"""Benchmark rows keep what the agent did: its queries, the passages each search returned, for
a world question whether each gold hop's passage came back and whether each next query named
the previous hop's answer; summaries per question kind."""

from __future__ import annotations

from advrag.datasets.records import QARecord
from advrag.evaluation.methods import MethodOutput
from advrag.evaluation.scoring import kind_metrics, score_rows, summarize

CHAIN = [{"subject": "Ovel", "relation": "founder", "object": "Kaheth Droube", "passage_id": "p1"},
         {"subject": "Kaheth Droube", "relation": "born_in", "object": "Brisca",
          "passage_id": "p2"},
         {"subject": "Brisca", "relation": "located_in", "object": "Varhir", "passage_id": "p3"}]
THREE_HOP = QARecord("q1", "In which country was the founder of Ovel born?", ["Varhir"],
                     {"type": "compositional", "hops": 3, "chain": CHAIN})
SINGLE = QARecord("q2", "Who founded Ovel?", ["Kaheth Droube"],
                  {"type": "single", "hops": 1, "chain": CHAIN[:1]})


def output(queries, ids, prediction="Varhir", cut_turns=0) -> MethodOutput:
    return MethodOutput(prediction, "", n_searches=len(queries), queries=tuple(queries),
                        retrieved_ids=tuple(tuple(i) for i in ids), cut_turns=cut_turns)


def test_a_row_records_hop_recall_and_chaining():
    # query 2 names hop 1's answer (Kaheth Droube); query 3 re-asks the question
    out = output(["Ovel founder", "kaheth droube born in", "founder of Ovel country"],
                 [["p1", "x"], ["p2", "y"], ["z", "w"]], cut_turns=1)
    row = score_rows([THREE_HOP], [out])[0]
    assert row["kind"] == "three-hop"
    assert row["queries"] == list(out.queries)
    assert row["retrieved_ids"] == [["p1", "x"], ["p2", "y"], ["z", "w"]]
    assert row["hops_retrieved"] == [True, True, False]
    assert row["chained"] == [True, False]
    assert row["cut_turns"] == 1


def test_a_name_inside_another_word_is_not_a_bridge():
    row = score_rows([THREE_HOP], [output(["Ovel founder", "Kaheth Droubek born"],
                                          [["p1"], ["p2"]])])[0]
    assert row["chained"] == [False]


def test_summaries_pool_hops_and_queries_and_split_by_kind():
    rows = score_rows([THREE_HOP, SINGLE], [
        output(["Ovel founder", "Kaheth Droube born in"], [["p1"], ["p2"]], prediction="Brisca",
               cut_turns=2),
        output(["Ovel founder"], [["p1"]], prediction="Kaheth Droube")])
    summary = summarize(rows)
    # hops: 3-hop row [T, T, F], single row [T] → 3 of 4; chained: [True] → 1.0
    assert summary["hop_recall"] == 0.75
    assert summary["chaining_rate"] == 1.0
    assert summary["cut_turns"] == 1.0
    kinds = kind_metrics(rows)
    assert kinds["kind/three-hop/hop_recall"] == 2 / 3
    assert kinds["kind/single/f1"] == 1.0 and kinds["kind/three-hop/f1"] == 0.0
    assert "kind/single/chaining_rate" not in kinds  # a one-hop question has no next query


def test_a_question_without_a_chain_gets_no_hop_figures():
    record = QARecord("u", "Who?", ["A"])
    row = score_rows([record], [output(["who"], [["p9"]], prediction="A")])[0]
    assert "hops_retrieved" not in row and row["kind"] == "untyped"
    assert "hop_recall" not in summarize([row])
