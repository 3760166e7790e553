"""SQuAD-format json: articles of paragraphs of questions, read into one record per question.

The version is told from the data: any `is_impossible` key, or a `version` naming 2.0, is
SQuAD 2.0; a `version` naming 1.1 is SQuAD 1.1; otherwise `squad_version` must say
(`check_version`). The file is read by the reading rule (finetune/tsv.py: UTF-8, BOM
removed, standard JSON: NaN and Infinity refused with their line). An id may be a string
or an integer (read as its decimal string). Bad questions (an answer whose `answer_start`
does not point at its text, no id, a repeated id, an empty context, an answerable question
without answers) are one line naming the id. A training set may drop them instead
(`drop_bad`): the reader then says how many and which.
"""

import dataclasses
import sys

from etils import epath

from xlnet_jax.errors import DataError, MissingFileError
from xlnet_jax.finetune import tsv

VERSIONS = ("1.1", "2.0")


@dataclasses.dataclass(frozen=True)
class Question:
    """One question about one paragraph.

    Attributes:
      qid: the question's id, unique in its file.
      question: the question text.
      context: the paragraph (shared, not copied, between its questions).
      answer_start: character offset of the first answer in `context` (-1 when impossible).
      answer_text: the first answer's text ('' when impossible): the training label.
      answers: every gold answer's text, for the metric ([] when impossible).
      is_impossible: SQuAD 2.0's unanswerable question.
    """

    qid: str
    question: str
    context: str
    answer_start: int
    answer_text: str
    answers: tuple[str, ...]
    is_impossible: bool


def read_squad(
    path: str, *, squad_version: str = "", drop_bad: bool = False
) -> tuple[list[Question], str]:
    """(questions in file order, the SQuAD version) of one SQuAD-format file.

    Args:
      path: the json file.
      squad_version: "" to tell from the data ("" is returned when it cannot tell: the file
        has no is_impossible keys, so its questions read the same either way), or "1.1" /
        "2.0" to read it as that version.
      drop_bad: drop bad questions (printing their count and first ids) instead of refusing.
    """
    if not epath.Path(path).exists():
        raise MissingFileError(f"{path}: no such file; --data_dir must hold the SQuAD json files.")
    data = tsv.read_json(path, "a SQuAD-format json file")
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DataError(f'{path}: a SQuAD file is {{"data": [articles], ...}}; no "data" list.')
    version = _version(path, data, squad_version)
    questions, bad, seen = [], [], set()
    for a, article in enumerate(data["data"]):
        for p, paragraph in enumerate(_items(path, article, "paragraphs", f"data[{a}]")):
            where = f"data[{a}].paragraphs[{p}]"
            context = paragraph.get("context")
            for q, qa in enumerate(_items(path, paragraph, "qas", where)):
                try:
                    question = _question(qa, context, version, seen, f"{where}.qas[{q}]")
                except DataError as e:
                    if not drop_bad:
                        raise DataError(f"{path}: {e}") from None
                    bad.append(str(e))
                    continue
                seen.add(question.qid)
                questions.append(question)
    if bad:
        print(
            f"{path}: dropped {len(bad)} bad question(s) of {len(bad) + len(questions)}; "
            f"first: {bad[0]}",
            file=sys.stderr,
        )
    if not questions:
        raise DataError(f"{path}: no usable questions.")
    return questions, version


def _version(path: str, data: dict, asked: str) -> str:
    """The SQuAD version of a file, or a DataError saying to pass --config.squad_version."""
    if asked:
        return check_version(path, "", asked)
    named = str(data.get("version", ""))
    impossible = any(
        "is_impossible" in qa
        for article in data["data"]
        if isinstance(article, dict)
        for paragraph in article.get("paragraphs", ())
        if isinstance(paragraph, dict)
        for qa in paragraph.get("qas", ())
        if isinstance(qa, dict)
    )
    if impossible or "2.0" in named:
        return "2.0"
    return "1.1" if "1.1" in named else ""


def check_version(path: str, version: str, asked: str) -> str:
    """The version to score `path` as: `asked` when given, else the one told from the data,
    else a DataError saying to pass --config.squad_version."""
    if asked and asked not in VERSIONS:
        raise DataError(f"squad_version must be one of {VERSIONS} or '', got {asked!r}.")
    if not (asked or version):
        raise DataError(
            f"{path}: cannot tell the SQuAD version (no version field naming 1.1 or 2.0, no "
            "is_impossible keys); pass --config.squad_version=1.1 or 2.0."
        )
    return asked or version


def _items(path: str, parent, key: str, where: str) -> list:
    """parent[key], which must be a list of objects."""
    items = parent.get(key) if isinstance(parent, dict) else None
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise DataError(f'{path}: {where} has no "{key}" list of objects.')
    return items


def _question(qa: dict, context, version: str, seen: set, where: str) -> Question:
    """One checked Question; a DataError naming the id (or the position, without one)."""
    qid = qa.get("id")
    if isinstance(qid, int) and not isinstance(qid, bool):
        qid = str(qid)  # KorQuAD-style numeric ids: predictions are keyed by strings
    if not isinstance(qid, str) or not qid:
        raise DataError(f'{where}: question has no "id".')
    if qid in seen:
        raise DataError(f"question {qid}: duplicate id (ids must be unique in a file).")
    if not isinstance(context, str) or not context.strip():
        raise DataError(f"question {qid}: its paragraph's context is empty.")
    question = qa.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"question {qid}: the question text is empty.")
    impossible = version == "2.0" and bool(qa.get("is_impossible", False))
    answers = qa.get("answers", [])
    if not isinstance(answers, list) or not all(isinstance(a, dict) for a in answers):
        raise DataError(f'question {qid}: "answers" must be a list of objects.')
    if impossible:
        return Question(qid, question, context, -1, "", (), True)
    if not answers:
        raise DataError(f"question {qid}: answerable but has no answers.")
    for answer in answers:
        text, start = answer.get("text"), answer.get("answer_start")
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"question {qid}: an answer has no text.")
        valid = isinstance(start, int) and not isinstance(start, bool) and start >= 0
        if not valid or context[start : start + len(text)] != text:
            found = context[start : start + len(text)] if valid else None
            raise DataError(
                f"question {qid}: answer_start {start!r} does not point at its text {text!r} "
                f"(the context there reads {found!r})."
            )
    first = answers[0]
    return Question(
        qid,
        question,
        context,
        first["answer_start"],
        first["text"],
        tuple(a["text"] for a in answers),
        False,
    )
