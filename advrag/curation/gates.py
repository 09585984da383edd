"""Data gates: refuse QA and corpus files that would silently poison training.

Each file is parsed line by line in plain Python (only Python can see a line
that is not JSON), turned into a table of scalar columns (raw values plus
derived counts such as ``n_golden``), and checked by a Great Expectations
suite on an ephemeral context. Derived counts stand in for list lengths
because GX's value-length expectations measure ``len(str(list))``.

Rules (the ``rule`` names in a report):

- ``missing_file``, ``empty_file``, ``malformed_json`` (a line that is not one
  JSON object) -- plain Python;
- ``missing_field:<name>``, ``duplicate_id``, ``empty_question``,
  ``empty_golden_answers``, ``bad_golden_answer`` (a non-string or blank
  answer) for QA files, and for a training split also ``leaked_id`` and
  ``leaked_question`` (a dev/test question by id or by normalised text); ``missing_field:<name>``, ``duplicate_id``,
  ``empty_passage`` (contents empty or only a title line) for corpora -- GX;
- for UR²'s curated sets, the QA rules plus ``bad_level``, ``bad_score``
  (outside [0, 1]), ``leaked_id`` and ``leaked_question`` (a dev/test question by
  id or by normalised text) and ``ratio:<level>`` (a level's share of the sample
  off the share its sampler was asked for by more than the tolerance) -- GX;
- for GAR's discriminator slice sets, ``missing_field:<name>``, ``duplicate_id``,
  ``bad_sound`` (not a JSON boolean), ``empty_slice``, ``empty_analysis``,
  ``empty_rationale``, ``bad_source``, ``bad_split``, ``balance`` (the share of
  sound slices off 1/2 by more than the tolerance), ``leaked_id`` and
  ``leaked_question`` (a dev/test question by id or normalised text) -- GX.

Great Expectations is imported inside functions: the import takes seconds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

SHOW_ROWS = 8  # rows listed per failed rule in a rendered report
SAMPLE_CHARS = 80  # characters of each sample value shown

# (rule, GX expectation class, kwargs, column shown as the sample, how to fix)
_Rule = tuple[str, str, dict[str, Any], str, str]
_ID_RULES: tuple[_Rule, ...] = (
    ("missing_field:id", "ExpectColumnValuesToNotBeNull", {"column": "id"}, "id",
     "give every row a non-empty 'id'"),
    ("duplicate_id", "ExpectColumnValuesToBeUnique", {"column": "id"}, "id",
     "make ids unique, e.g. suffix the split name and row number"),
)
_QA_RULES: tuple[_Rule, ...] = _ID_RULES + (
    ("missing_field:question", "ExpectColumnValuesToNotBeNull", {"column": "question"},
     "question", "add a 'question' string to every record"),
    ("missing_field:golden_answers", "ExpectColumnValuesToNotBeNull",
     {"column": "golden_answers"}, "golden_answers",
     "add 'golden_answers', a list of answer strings, e.g. [\"Paris\"]"),
    ("empty_question", "ExpectColumnValuesToBeBetween",
     {"column": "question_chars", "min_value": 1}, "question",
     "'question' must be a non-blank string; write it or drop the record"),
    ("empty_golden_answers", "ExpectColumnValuesToBeBetween",
     {"column": "n_golden", "min_value": 1}, "golden_answers",
     "'golden_answers' must be a non-empty list, e.g. [\"Paris\"]; drop unanswerable records"),
    ("bad_golden_answer", "ExpectColumnValuesToBeBetween",
     {"column": "n_bad_golden", "max_value": 0}, "golden_answers",
     "every answer must be a non-blank string: quote numbers (\"1984\"), remove nulls and blanks"),
)
_CORPUS_RULES: tuple[_Rule, ...] = _ID_RULES + (
    ("missing_field:contents", "ExpectColumnValuesToNotBeNull", {"column": "contents"},
     "contents", "add 'contents' as \"title\\ntext\" to every passage"),
    ("empty_passage", "ExpectColumnValuesToBeBetween",
     {"column": "body_chars", "min_value": 1}, "contents",
     "write the passage text after the title line (\"title\\ntext\") or drop the passage"),
)
_PY_FIXES = {
    "missing_file": "check the path, or produce the file with its pipeline stage first",
    "empty_file": "the file has no records; regenerate it or remove it from the inputs",
    "malformed_json": "make each line exactly one JSON object (no trailing commas, "
                      "no line breaks inside a record), or delete the line",
    "unreadable_file": "a .json QA file holds one JSON array of records; a .parquet file one "
                       "table of them (or save the records as .jsonl, one a line)",
}


class DataGateError(ValueError):
    """One or more data files failed their gate; the message holds every report."""


class GateFailure(NamedTuple):
    """One failed rule: the offending 1-based line numbers, their ids, sample values."""

    rule: str
    lines: list[int]
    ids: list[str]
    samples: list[str]
    fix: str


@dataclass
class GateReport:
    """Outcome of validating one file: what was checked and every failed rule."""

    file: str
    kind: str
    n_rows: int = 0
    failures: list[GateFailure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no rule failed."""
        return not self.failures

    def render(self) -> str:
        """A readable report: per failed rule, which lines/ids, sample values, how to fix."""
        head = f"{self.file} ({self.kind}, {self.n_rows} rows)"
        if self.ok:
            return f"[OK]   {head}: all checks passed"
        lines = [f"[FAIL] {head}: {len(self.failures)} rule(s) failed"]
        for fail in self.failures:
            lines.append(f"  - {fail.rule}: {len(fail.lines) or 'whole file'}"
                         f"{' row(s)' if fail.lines else ''}")
            if fail.lines:
                lines.append(f"      lines: {_listing(fail.lines)}")
            if any(fail.ids):
                lines.append(f"      ids:   {_listing(fail.ids)}")
            if fail.samples:
                lines.append(f"      e.g.   {' | '.join(fail.samples[:3])}")
            lines.append(f"      fix:   {fail.fix}")
        return "\n".join(lines)


def _listing(values: list[Any]) -> str:
    shown = ", ".join(str(v) for v in values[:SHOW_ROWS])
    more = len(values) - SHOW_ROWS
    return shown + (f", ... and {more} more" if more > 0 else "")


def _clip(text: str) -> str:
    return text if len(text) <= SAMPLE_CHARS else text[: SAMPLE_CHARS - 3] + "..."


def _short(value: Any) -> str:
    """A JSON rendering of a value, clipped; strings show quoted so blanks are visible."""
    return _clip(json.dumps(value, ensure_ascii=False))


def _py_failure(rule: str, lines: list[int] | None = None,
                samples: list[str] | None = None) -> GateFailure:
    return GateFailure(rule, lines or [], [], samples or [], _PY_FIXES[rule])


def _parse_rows(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], GateFailure | None]:
    """Numbered rows of a JSON-lines file (``_parse_lines``), or of a QA file in a whole-file
    format (a JSON array, parquet: row numbers from 1), or the failure saying why it is
    unreadable."""
    from advrag.datasets.loaders import read_rows
    from advrag.datasets.records import DataFormatError

    if path.suffix.lower() not in (".json", ".parquet"):
        return _parse_lines(path)
    try:
        return list(enumerate(read_rows(path), start=1)), None
    except (DataFormatError, OSError, ValueError) as err:
        return [], _py_failure("unreadable_file", samples=[_clip(str(err))])


def _parse_lines(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], GateFailure | None]:
    """Good ``(line number, object)`` pairs, and a ``malformed_json`` failure if any line is bad."""
    rows: list[tuple[int, dict[str, Any]]] = []
    bad_lines: list[int] = []
    bad_text: list[str] = []
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                obj = None
            if isinstance(obj, dict):
                rows.append((line_no, obj))
            else:
                bad_lines.append(line_no)
                bad_text.append(_clip(line.strip()))
    return rows, (_py_failure("malformed_json", bad_lines, bad_text) if bad_lines else None)


def _id_value(obj: dict[str, Any]) -> str | None:
    raw = obj.get("id")
    return None if raw is None or not str(raw).strip() else str(raw)


def _qa_frame(rows: list[tuple[int, dict[str, Any]]]) -> Any:
    """One row per record: shown values plus derived counts the QA suite checks."""
    import pandas as pd

    table = []
    for line_no, obj in rows:
        question, answers = obj.get("question"), obj.get("golden_answers")
        is_list = isinstance(answers, list)
        table.append({
            "line": line_no,
            "id": _id_value(obj),
            "question": None if question is None else _short(question),
            "golden_answers": None if answers is None else _short(answers),
            "question_chars": None if question is None
            else len(question.strip()) if isinstance(question, str) else 0,
            "n_golden": None if answers is None else len(answers) if is_list else 0,
            "n_bad_golden": sum(not (isinstance(a, str) and a.strip()) for a in answers)
            if is_list else None,
        })
    return pd.DataFrame.from_records(table).set_index("line")


def _passage_body(contents: str) -> str:
    """Text after the title line; a contents without a newline is all body (no title)."""
    return contents.split("\n", 1)[1] if "\n" in contents else contents


def _corpus_frame(rows: list[tuple[int, dict[str, Any]]]) -> Any:
    """One row per passage: id, shown contents, and characters of body text."""
    import pandas as pd

    table = []
    for line_no, obj in rows:
        contents = obj.get("contents")
        table.append({
            "line": line_no,
            "id": _id_value(obj),
            "contents": None if contents is None else _short(contents),
            "body_chars": None if contents is None
            else len(_passage_body(contents).strip()) if isinstance(contents, str) else 0,
        })
    return pd.DataFrame.from_records(table).set_index("line")


def _build_validation(name: str, rules: tuple[_Rule, ...]) -> Any:
    """An ephemeral GX context holding one pandas asset and the suite for ``rules``."""
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = (context.data_sources.add_pandas(f"{name}_source")
             .add_dataframe_asset(name).add_batch_definition_whole_dataframe("whole"))
    suite = context.suites.add(gx.ExpectationSuite(name=f"{name}_gate"))
    for rule, expectation, kwargs, _, _ in rules:
        suite.add_expectation(getattr(gxe, expectation)(**kwargs, meta={"rule": rule}))
    return context.validation_definitions.add(
        gx.ValidationDefinition(name=f"{name}_gate", data=batch, suite=suite))


def _cell(frame: Any, line: int, column: str) -> str:
    import pandas as pd

    value = frame.at[line, column]
    return "<missing>" if pd.isna(value) else str(value)


def _run_suite(frame: Any, name: str, rules: tuple[_Rule, ...]) -> list[GateFailure]:
    """Validate ``frame`` with GX; one ``GateFailure`` per failed expectation."""
    result = _build_validation(name, rules).run(
        batch_parameters={"dataframe": frame}, result_format={"result_format": "COMPLETE"})
    by_rule = {rule[0]: rule for rule in rules}
    failures = []
    for outcome in result.results:
        if outcome.success:
            continue
        rule, _, _, shown, fix = by_rule[outcome.expectation_config.meta["rule"]]
        if outcome.exception_info.get("raised_exception"):
            message = str(outcome.exception_info.get("exception_message"))
            failures.append(GateFailure(rule, [], [], [message], "the check itself crashed; "
                                        "report this with the file"))
            continue
        lines = sorted({int(i["line"]) for i in outcome.result.get("unexpected_index_list", [])})
        samples = [] if shown == "id" else [_cell(frame, n, shown) for n in lines[:3]]
        failures.append(GateFailure(rule, lines, [_cell(frame, n, "id") for n in lines],
                                    samples, fix))
    return failures


def _validate(path: str | os.PathLike[str], name: str, kind: str, rules: tuple[_Rule, ...],
              to_frame: Callable[[list[tuple[int, dict[str, Any]]]], Any]) -> GateReport:
    """Shared body of the two gates: file checks, line parsing, then the GX suite."""
    source = Path(path)
    report = GateReport(str(source), kind)
    if not source.is_file():
        report.failures.append(_py_failure("missing_file"))
        return report
    rows, malformed = _parse_rows(source)
    report.n_rows = len(rows) + (len(malformed.lines) if malformed else 0)
    if malformed:
        report.failures.append(malformed)
    if report.n_rows == 0 and malformed is None:
        report.failures.append(_py_failure("empty_file"))
    if rows:
        report.failures.extend(_run_suite(to_frame(rows), name, rules))
    return report


def validate_qa_file(path: str | os.PathLike[str]) -> GateReport:
    """Check a JSON-lines QA file (FlashRAG format) against the QA rules."""
    return _validate(path, "qa", "QA records", _QA_RULES, _qa_frame)


def validate_corpus_file(path: str | os.PathLike[str]) -> GateReport:
    """Check a JSON-lines corpus (``{"id", "contents"}``) against the corpus rules."""
    return _validate(path, "corpus", "corpus passages", _CORPUS_RULES, _corpus_frame)


def validate_curated_file(path: str | os.PathLike[str], *, heldout: Iterable[dict[str, Any]],
                          expected_shares: dict[str, float], tolerance: float = 0.05) -> GateReport:
    """Check a curated jsonl (QA records + ``level``, ``score``) against the curated rules.

    ``heldout``: the dev/test records no curated question may repeat (by id, or by
    SQuAD-normalised text); ``expected_shares``: level → share of the sample.
    """
    from advrag.core.metrics import normalize_answer

    held = list(heldout)
    rules = _QA_RULES + _curated_rules({str(r["id"]) for r in held},
                                       {normalize_answer(r["question"]) for r in held},
                                       expected_shares, tolerance)
    return _validate(path, "curated", "curated QA records", rules, _curated_frame)


def _leak_rules(id_column: str, held_ids: set[str], held_questions: set[str], where: str,
                fix: str) -> tuple[_Rule, ...]:
    """``leaked_id`` and ``leaked_question``: no dev/test question in ``where``, by id (in
    ``id_column``) or by SQuAD-normalised text."""
    return (
        ("leaked_id", "ExpectColumnValuesToNotBeInSet",
         {"column": id_column, "value_set": sorted(held_ids)}, id_column,
         f"a dev/test question is in {where}: {fix}"),
        ("leaked_question", "ExpectColumnValuesToNotBeInSet",
         {"column": "normalised_question", "value_set": sorted(held_questions)}, "question",
         f"a dev/test question (same text, another id) is in {where}: remove it"),
    )


def validate_train_file(path: str | os.PathLike[str],
                        heldout: Iterable[dict[str, Any]]) -> GateReport:
    """Check a training split against the QA rules and ``leaked_id``/``leaked_question``: no
    question of ``heldout`` (the dev/test rows) in it, by id or by SQuAD-normalised text."""
    from advrag.core.metrics import normalize_answer

    held = list(heldout)
    rules = _QA_RULES + _leak_rules("id", {str(r.get("id")) for r in held},
                                    {normalize_answer(str(r.get("question") or ""))
                                     for r in held},
                                    "the training split", "keep it out of train")
    return _validate(path, "train", "training QA records", rules, _train_frame)


def _train_frame(rows: list[tuple[int, dict[str, Any]]]) -> Any:
    """The QA frame plus the normalised question."""
    from advrag.core.metrics import normalize_answer

    frame = _qa_frame(rows)
    frame["normalised_question"] = [normalize_answer(str(obj.get("question") or ""))
                                    for _, obj in rows]
    return frame


def _curated_rules(held_ids: set[str], held_questions: set[str], shares: dict[str, float],
                   tolerance: float) -> tuple[_Rule, ...]:
    """The curated set's own rules, built for one held-out set and one expected ratio."""
    rules: list[_Rule] = [
        ("missing_field:level", "ExpectColumnValuesToNotBeNull", {"column": "level"}, "id",
         "every curated record needs its 'level' (easy, medium or hard)"),
        ("missing_field:score", "ExpectColumnValuesToNotBeNull", {"column": "score"}, "id",
         "every curated record needs its numeric 'score' (mean answer metric over k rollouts)"),
        ("bad_level", "ExpectColumnValuesToBeInSet",
         {"column": "level", "value_set": ["easy", "medium", "hard"]}, "level",
         "levels are easy, medium or hard; filtered questions (s < 0.2) belong in stage1.jsonl"),
        ("bad_score", "ExpectColumnValuesToBeBetween",
         {"column": "score", "min_value": 0.0, "max_value": 1.0}, "score",
         "a score is a mean answer metric in [0, 1]; re-run the curation"),
        *_leak_rules("id", held_ids, held_questions, "the training set",
                     "curate from the train split only"),
    ]
    for level, share in shares.items():
        rules.append((f"ratio:{level}", "ExpectColumnMeanToBeBetween",
                      {"column": f"is_{level}", "min_value": share - tolerance,
                       "max_value": share + tolerance}, "level",
                      f"the sample's share of {level} questions should be {share:.3f}: "
                      "draw it with sample_by_difficulty"))
    return tuple(rules)


def _curated_frame(rows: list[tuple[int, dict[str, Any]]]) -> Any:
    """The QA frame plus level, score, the normalised question and one 0/1 column per level."""
    frame = _train_frame(rows)
    objs = [obj for _, obj in rows]
    frame["level"] = [obj.get("level") for obj in objs]
    frame["score"] = [obj.get("score") if isinstance(obj.get("score"), (int, float)) else None
                      for obj in objs]
    for level in ("easy", "medium", "hard"):
        frame[f"is_{level}"] = [float(obj.get("level") == level) for obj in objs]
    return frame



_SLICE_FIELDS = ("question_id", "question", "slice", "evidence", "sound", "analysis", "rationale",
                 "source", "split")


def validate_slice_file(path: str | os.PathLike[str], heldout_questions: Iterable[dict[str, Any]],
                        *, tolerance: float = 0.05) -> GateReport:
    """Check a GAR discriminator slice set (``curation.gar_data`` rows) against the slice rules.

    ``heldout_questions``: the world's dev/test records, which no slice's question
    may repeat (by id, or by SQuAD-normalised text); ``tolerance``: how far the
    share of sound slices may stray from 1/2.
    """
    from advrag.core.metrics import normalize_answer

    held = list(heldout_questions)
    rules = _ID_RULES + _slice_rules({str(r["id"]) for r in held},
                                     {normalize_answer(r["question"]) for r in held}, tolerance)
    return _validate(path, "slices", "GAR slices", rules, _slice_frame)


def _slice_rules(held_ids: set[str], held_questions: set[str],
                 tolerance: float) -> tuple[_Rule, ...]:
    """The slice set's own rules, built for one held-out set and one tolerance."""
    from advrag.curation.gar_data import SOURCES, SPLITS

    missing: list[_Rule] = [
        (f"missing_field:{name}", "ExpectColumnValuesToNotBeNull", {"column": name}, "id",
         f"every slice row needs its '{name}'; rebuild the set with gar_data.build_slice_set")
        for name in _SLICE_FIELDS]
    text: list[_Rule] = [
        (f"empty_{name}", "ExpectColumnValuesToBeBetween",
         {"column": f"{name}_chars", "min_value": 1}, name,
         f"'{name}' must be a non-blank string; drop the row or relabel the slice")
        for name in ("slice", "analysis", "rationale")]
    return tuple(missing + text + [
        ("bad_sound", "ExpectColumnValuesToBeBetween",
         {"column": "sound_is_bool", "min_value": 1}, "sound",
         "'sound' is the judge's verdict as a JSON boolean (true/false), not 1/0 or \"yes\""),
        ("bad_evidence", "ExpectColumnValuesToBeBetween",
         {"column": "evidence_is_list", "min_value": 1}, "evidence",
         "'evidence' is the list of passage strings retrieved before the slice ([] for none)"),
        ("bad_source", "ExpectColumnValuesToBeInSet",
         {"column": "source", "value_set": list(SOURCES)}, "source",
         f"a slice comes from one of {', '.join(SOURCES)}"),
        ("bad_split", "ExpectColumnValuesToBeInSet",
         {"column": "split", "value_set": list(SPLITS)}, "split",
         f"a slice belongs to one of the splits {', '.join(SPLITS)}"),
        ("balance", "ExpectColumnMeanToBeBetween",
         {"column": "is_sound", "min_value": 0.5 - tolerance, "max_value": 0.5 + tolerance},
         "sound", "yes and no must be balanced 1:1 (GAR §3): downsample with balance_labels"),
        *_leak_rules("question_id", held_ids, held_questions, "the discriminator's data",
                     "build it from the train split"),
    ])


def _slice_frame(rows: list[tuple[int, dict[str, Any]]]) -> Any:
    """One row per slice: the fields, a few shown clipped, plus the derived checks' columns."""
    import pandas as pd

    from advrag.core.metrics import normalize_answer

    table = []
    for line_no, obj in rows:
        sound, evidence = obj.get("sound"), obj.get("evidence")
        row = {"line": line_no, "id": _id_value(obj),
               **{name: obj.get(name) for name in ("question_id", "source", "split")},
               **{name: None if obj.get(name) is None else _short(obj[name])
                  for name in ("question", "slice", "analysis", "rationale")},
               "sound": None if sound is None else json.dumps(sound),
               "sound_is_bool": float(isinstance(sound, bool)),
               "evidence": None if evidence is None else _short(evidence),
               "evidence_is_list": float(isinstance(evidence, list)
                                         and all(isinstance(p, str) for p in evidence)),
               "is_sound": float(sound is True),
               "normalised_question": normalize_answer(str(obj.get("question") or ""))}
        for name in ("slice", "analysis", "rationale"):
            value = obj.get(name)
            row[f"{name}_chars"] = (None if value is None
                                    else len(value.strip()) if isinstance(value, str) else 0)
        table.append(row)
    return pd.DataFrame.from_records(table).set_index("line")

def require_valid(qa_paths: Iterable[str | os.PathLike[str]] = (),
                  corpus_paths: Iterable[str | os.PathLike[str]] = ()) -> list[GateReport]:
    """Validate every QA and corpus file; raise ``DataGateError`` if any fails.

    The error message holds every report rendered (passing ones too), so one run
    shows all that needs fixing. Returns the reports when all pass.
    """
    qa_list, corpus_list = _as_list(qa_paths), _as_list(corpus_paths)
    if not qa_list and not corpus_list:
        raise ValueError("require_valid got no files; pass qa_paths and/or corpus_paths")
    reports = ([validate_qa_file(p) for p in qa_list]
               + [validate_corpus_file(p) for p in corpus_list])
    failed = [r for r in reports if not r.ok]
    if failed:
        raise DataGateError(f"{len(failed)} of {len(reports)} data file(s) failed the data "
                            "gate:\n\n" + "\n\n".join(r.render() for r in reports))
    return reports


def require_unleaked(train: str | os.PathLike[str],
                     heldout: Iterable[str | os.PathLike[str]]) -> GateReport:
    """Refuse a training split that holds a question of the ``heldout`` files (dev, test):
    ``DataGateError`` with the report (``validate_train_file``). Run it on files that passed
    ``require_valid``."""
    from advrag.datasets.loaders import read_rows

    report = validate_train_file(train, [row for path in heldout for row in read_rows(path)])
    if not report.ok:
        raise DataGateError("the training split holds dev/test questions: a model trained on "
                            "them is scored on what it saw.\n\n" + report.render())
    return report


def _as_list(paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str]) -> list[Any]:
    """Accept one path or many (a bare string is one path, not its characters)."""
    return [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
