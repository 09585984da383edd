"""GAR's judged-slices figure on hand-made judgments, and reading a judgment's rationale."""

from __future__ import annotations

import pytest

from advrag.evaluation.reports import JUDGED_TEXT_CHARS, judged_slices_figure
from advrag.recipes.gar.recipe import rationale

JUDGMENTS = [
    {"source": "reference", "question": "Where was Ada born?", "slice": "Ada was born in Oslo.",
     "p_yes": 0.91, "verdict": True, "rationale": "The passage names Oslo.", "correct": None},
    {"source": "generated", "question": "Where was Ada born?", "slice": "word " * 200,
     "p_yes": 0.12, "verdict": False, "rationale": "Oslo is not Bergen.", "correct": False},
    {"source": "generated", "question": "Who founded Acme?", "slice": "Acme was founded by Bo.",
     "p_yes": None, "verdict": None, "rationale": "", "correct": True},
]


def panel_texts(fig) -> list[tuple[str, str]]:
    """(title, body) of each panel."""
    return [(ax.get_title(loc="left"), ax.texts[0].get_text()) for ax in fig.axes]


def test_one_panel_per_judgment_with_its_verdict_score_and_rationale(tmp_path):
    fig = judged_slices_figure(JUDGMENTS)
    titles, bodies = zip(*panel_texts(fig))
    assert titles == ("reference slice — P(yes) 0.91, verdict yes",
                      "generated slice (rollout answer wrong) — P(yes) 0.12, verdict no",
                      "generated slice (rollout answer correct) — P(yes) n/a, verdict malformed")
    assert "rationale: The passage names Oslo." in bodies[0]
    assert "rationale: (empty)" in bodies[2]
    fig.savefig(tmp_path / "judged.png")
    assert (tmp_path / "judged.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_long_slices_are_cut_with_an_ellipsis():
    body = panel_texts(judged_slices_figure(JUDGMENTS[1:2]))[0][1]
    slice_part = body.split("slice: ", 1)[1].split("rationale:", 1)[0]
    text = " ".join(slice_part.split())
    # 200 words of 5 characters would be 999; the panel keeps at most JUDGED_TEXT_CHARS.
    assert text.endswith("…") and len(text) <= JUDGED_TEXT_CHARS


def test_no_judgments_is_a_clear_error():
    with pytest.raises(ValueError, match="no judged slices"):
        judged_slices_figure([])


def test_rationale_is_the_text_after_its_label():
    out = "Analysis: names Oslo.\nVerdict: yes\nRationale: the passage says so.\n"
    assert rationale(out) == "the passage says so."
    assert rationale("Verdict: no") == ""


def test_slice_score_histograms_show_the_first_and_last_update():
    from advrag.evaluation.reports import slice_score_histograms

    log = [{"step": 0, "reference": [0.9, 0.8], "generated": [0.1]},
           {"step": 1, "reference": [0.7], "generated": [0.2, 0.3, 0.35]},
           {"step": 2, "reference": [0.95, 0.85, 0.9], "generated": [0.05, 0.1]}]
    fig = slice_score_histograms(log)
    assert [ax.get_title(loc="left") for ax in fig.axes] == ["update 0", "update 2"]
    counts = [sum(bar.get_height() for bar in container) for container in fig.axes[1].containers]
    assert counts == [3, 2]  # the last update's 3 reference and 2 generated slices
    assert [t.get_text() for t in fig.axes[1].get_legend().get_texts()] == [
        "reference (3)", "generated (2)"]
    assert len(slice_score_histograms(log[:1]).axes) == 1
    with pytest.raises(ValueError, match="no slice scores"):
        slice_score_histograms([])
