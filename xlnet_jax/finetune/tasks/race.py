"""RACE: reading comprehension with four options, each scored by the same head.

The release's layout: --data_dir/{train,dev,test}/{middle,high}/ with one JSON file per
article ({"article", "questions", "options" (4 per question), "answers" ("A".."D"), "id"}).
Each option becomes one row as the original's run_race builds it: the article, <sep>, the
question with the option put in place of "_" (or appended after a space), <sep>, <cls>; the
question-and-option part keeps its last max_qa_length tokens, the article its first tokens
that fit. Every row here is built anew (config.race_rows "fresh"). The original's
run_race:189 (`tokens = tokens_context`) aliases the article's token list and appends the
row to it in place, so that while the rows fit, option k's segment A also holds options
0..k-1, each with its <sep> ... <sep> <cls> (zihangdai/xlnet#204); the published RACE
figures were made with those rows, and config.race_rows "aliased" builds them (aliased_rows),
to compare with the published figures.
A softmax over the four rows' logits picks the answer.

Passages longer than one row are read through the recurrence memory (config.num_segments):
each segment is a whole row of its own, a window of the article, <sep>, the question and
option, <sep>, <cls> (as SQuAD's windows each carry the question), the windows consecutive
and in order, each as long as the option leaves room for; segments the article does not
reach are padding, first. Every window is so read beside the option, and the memory carries
option-aware states to the last segment, whose <cls> the head reads. (Cutting one long row
into segments instead leaves the article's segments blind to the option: on the man-page
task of docs/fine-tuning.md that reading stays far below the truncated one.) One segment is
the original's row.

Files are read by the reading rule (finetune/tsv.py: UTF-8, BOM removed, standard JSON).
Every row keeps some of its article: a max_qa_length that could leave none is refused, and
the rows whose question-and-option or article were cut are counted and the counts printed.
A training question needs its answer; an evaluated split has every answer (scored) or none
(predictions only, printed as such).
"""

import dataclasses
from collections.abc import Sequence

import flax.linen as nn
import jax
import ml_collections
import numpy as np
import optax

from xlnet_jax import paths
from xlnet_jax.config import ModelConfig
from xlnet_jax.data.tokenizer import CLS_ID, PAD_ID, SEP_ID
from xlnet_jax.errors import ConfigError, DataError, MissingFileError
from xlnet_jax.finetune import features, metrics, tsv
from xlnet_jax.finetune.task import Features, Task
from xlnet_jax.finetune.text import TextEncoder
from xlnet_jax.model.heads import SequenceHead

LEVELS = ("middle", "high")
CHOICES = "ABCD"
_LAYOUT = "RACE's layout: SPLIT/{middle,high}/ARTICLE.txt, each a JSON object"


@dataclasses.dataclass(frozen=True)
class RaceExample:
    """One question: index "LEVEL/FILE:QUESTION", label 0-3 (None if the file has none)."""

    index: str
    article: str
    question: str
    options: tuple[str, ...]
    label: int | None
    level: str


def _strings(value, count: int | None = None) -> bool:
    """Whether `value` is a list of strings (of `count` items when given)."""
    return (
        isinstance(value, list)
        and all(isinstance(item, str) for item in value)
        and (count is None or len(value) == count)
    )


def _question_examples(path: str, level: str, data: dict) -> list[RaceExample]:
    """The examples of one article file, checking its fields."""
    for key in ("article", "questions", "options"):
        if key not in data:
            raise DataError(f"{path}: no {key!r} field (expected {_LAYOUT})")
    questions, options = data["questions"], data["options"]
    answers = data.get("answers")
    if not isinstance(data["article"], str) or not data["article"].strip():
        raise DataError(f"{path}: the article is empty or not a string (expected {_LAYOUT})")
    if (
        not _strings(questions)
        or not isinstance(options, list)
        or (answers is not None and not isinstance(answers, list))
    ):
        raise DataError(
            f"{path}: questions, options and answers must be lists (expected {_LAYOUT})"
        )
    if len(options) != len(questions) or (answers is not None and len(answers) != len(questions)):
        raise DataError(
            f"{path}: {len(questions)} questions, {len(options)} option lists and "
            f"{len(answers or [])} answers; expected one of each per question"
        )
    examples = []
    for i, question in enumerate(questions):
        if not _strings(options[i], len(CHOICES)):
            raise DataError(f"{path}: question {i + 1} needs a list of 4 option strings, got "
                            f"{str(options[i])[:80]}")  # fmt: skip
        label = None
        if answers is not None:
            if not isinstance(answers[i], str) or answers[i] not in CHOICES:
                raise DataError(
                    f"{path}: answer {i + 1} is {answers[i]!r}, expected one of A B C D"
                )
            label = CHOICES.index(answers[i])
        name = f"{level}/{paths.as_path(path).name}:{i}"
        examples.append(
            RaceExample(name, data["article"], question, tuple(options[i]), label, level)
        )
    return examples


def _check_answers(folder: str, split: str, examples: list[RaceExample]) -> None:
    """Every question of a split has its answer, or (not train) none has: then say so."""
    missing = [e.index for e in examples if e.label is None]
    if not missing:
        return
    if split == "train" or len(missing) < len(examples):
        need = "training needs" if split == "train" else "a split is scored only with"
        raise DataError(
            f"{folder}: {len(missing)} of {len(examples)} questions have no answer (first: "
            f"{missing[0]}); {need} every answer"
        )
    tsv.note(f"{folder}: no question has an answer: predictions only, no accuracy")


def _report_cuts(qa_lengths: list[int], cut_articles: int, config) -> None:
    """Prints how many rows lost the start of their question and option (max_qa_length)
    and how many the end of their article (num_segments windows beside the option)."""
    cut = sum(length > config.max_qa_length for length in qa_lengths)
    if cut:
        tsv.note(
            f"RACE: max_qa_length {config.max_qa_length} cut the question and option of {cut} "
            f"of {len(qa_lengths)} rows (longest {max(qa_lengths)} pieces; their start is lost)"
        )
    if cut_articles:
        tsv.note(
            f"RACE: the article was cut to fit seq_len {config.seq_len} x num_segments "
            f"{config.num_segments} in {cut_articles} of {len(qa_lengths)} rows"
        )


def _windows(
    article: list[int], qa: list[int], window: int, config: ml_collections.ConfigDict
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One option's segments, each [num_segments, seq_len]: the article's consecutive windows
    of `window` tokens (its first num_segments), each a row with the question and option
    (features.pair_row); padding rows first where the article needs fewer."""
    pieces = [article[start : start + window] for start in range(0, max(len(article), 1), window)]
    pieces = pieces[: config.num_segments]
    padding = config.num_segments - len(pieces)
    blank = (
        np.full((padding, config.seq_len), PAD_ID, np.int32),
        np.full((padding, config.seq_len), features.SEG_PAD, np.int32),
        np.ones((padding, config.seq_len), bool),
    )
    filled = [features.pair_row(piece, qa, config.seq_len, 1) for piece in pieces]
    return tuple(
        np.concatenate([empty, *parts]) for empty, *parts in zip(blank, *filled, strict=True)
    )


def aliased_rows(
    article: list[int], qas: list[list[int]], seq_len: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The original's rows of one question (run_race convert_single_example, with its
    list aliasing, zihangdai/xlnet#204), each [1, options, seq_len]: while article + qa fits
    seq_len - 3, the row's segment A is the article list itself, which then grows by the row
    (<sep> qa <sep> <cls>), all of it segment A for the next option; once it does not fit,
    A is a cut copy (no more growth). `qas` are already cut to max_qa_length. Padding on the
    left, with PAD_ID (the original pads with 0; the mask hides either)."""
    context, ids, segs, masks = list(article), [], [], []
    for qa in qas:
        aliased = len(context) + len(qa) <= seq_len - 3
        a = context if aliased else context[: seq_len - 3 - len(qa)]
        tokens = [*a, SEP_ID, *qa, SEP_ID, CLS_ID]
        types = [features.SEG_A] * (len(a) + 1) + [features.SEG_B] * (len(qa) + 1)
        types.append(features.SEG_CLS)
        if aliased:
            context = tokens  # the original's in-place appends to tokens_context
        pad = seq_len - len(tokens)
        ids.append([PAD_ID] * pad + tokens)
        segs.append([features.SEG_PAD] * pad + types)
        masks.append(np.arange(seq_len) < pad)
    return (
        np.array(ids, np.int32)[None],
        np.array(segs, np.int32)[None],
        np.array(masks, bool)[None],
    )


class Race(Task):
    name, head = "race", "multiple_choice"
    eval_splits = ("dev",)
    test_splits = ("test",)

    def has_split(self, data_dir: str, split: str) -> bool:
        return any((paths.as_path(data_dir) / split / level).is_dir() for level in LEVELS)

    def labels(self, data_dir: str) -> list[str]:
        del data_dir
        return list(CHOICES)

    def read(self, data_dir: str, split: str) -> list[RaceExample]:
        examples = []
        for level in LEVELS:
            folder = paths.as_path(data_dir) / split / level
            if not folder.is_dir():
                raise MissingFileError(f"{folder}: not found (expected {_LAYOUT})")
            for file in sorted(folder.iterdir(), key=lambda p: p.name):
                data = tsv.read_json(str(file), _LAYOUT)
                if not isinstance(data, dict):
                    raise DataError(f"{file}: not a JSON object (expected {_LAYOUT})")
                examples += _question_examples(str(file), level, data)
        folder = paths.as_path(data_dir) / split
        if not examples:
            raise DataError(f"{folder}: no questions (expected {_LAYOUT})")
        _check_answers(str(folder), split, examples)
        return examples

    def featurize(
        self,
        examples: Sequence[RaceExample],
        encoder: TextEncoder,
        config: ml_collections.ConfigDict,
        labels: list[str],
    ) -> Features:
        del labels
        if config.seq_len - 3 - config.max_qa_length < 1:
            raise ConfigError(
                f"config.max_qa_length: {config.max_qa_length} leaves no room for the article in "
                f"a row of seq_len {config.seq_len} (3 special tokens; every segment holds the "
                f"question and option); use max_qa_length {config.seq_len - 4} or less"
            )
        aliased = config.get("race_rows", "fresh") == "aliased"
        if aliased and config.num_segments != 1:
            raise ConfigError(
                f'config.race_rows: "aliased" (the original\'s one-row layout) with '
                f"config.num_segments {config.num_segments}; set num_segments=1 or "
                "race_rows=fresh"
            )
        articles = {text: None for text in (e.article for e in examples)}
        articles = dict(zip(articles, encoder.encode_many(list(articles)), strict=True))
        rows, qa_lengths, cut_articles = [], [], 0
        for example in examples:
            qas = [
                example.question.replace("_", option) if "_" in example.question
                else f"{example.question} {option}"
                for option in example.options
            ]  # fmt: skip
            options, encoded = [], encoder.encode_many(qas)
            qa_lengths += [len(qa) for qa in encoded]
            encoded = [qa[-config.max_qa_length :] for qa in encoded]
            article = articles[example.article]
            if aliased:
                cut_articles += sum(len(article) + len(qa) > config.seq_len - 3 for qa in encoded)
                rows.append(aliased_rows(article, encoded, config.seq_len))
                continue
            for qa in encoded:
                window = config.seq_len - 3 - len(qa)
                cut_articles += len(article) > window * config.num_segments
                options.append(_windows(article, qa, window, config))
            rows.append(tuple(np.stack(parts, axis=1) for parts in zip(*options, strict=True)))
        _report_cuts(qa_lengths, cut_articles, config)
        arrays = features.stack_rows(rows)
        arrays["label"] = np.array([e.label or 0 for e in examples], np.int32)
        return Features(arrays, np.arange(len(examples)))

    def module(self, model: ModelConfig, labels: list[str]) -> nn.Module:
        del labels
        return SequenceHead(model, 1)

    def batch_spec(self, config: ml_collections.ConfigDict) -> dict[str, tuple[tuple, str]]:
        return {**features.input_spec(config, (len(CHOICES),)), "label": ((), "int32")}

    def loss(self, outputs: jax.Array, batch: dict[str, jax.Array]) -> jax.Array:
        return optax.softmax_cross_entropy_with_integer_labels(outputs[..., 0], batch["label"])

    def predict(
        self,
        examples: Sequence[RaceExample],
        features: Features,
        outputs: np.ndarray,
        labels: list[str],
    ) -> list[dict]:
        del features
        return [
            {"index": e.index, "prediction": labels[int(np.argmax(logits[:, 0]))],
             "logits": logits[:, 0].tolist()}
            for e, logits in zip(examples, outputs, strict=True)
        ]  # fmt: skip

    def metrics(self, examples: Sequence[RaceExample], predictions: list[dict]) -> dict[str, float]:
        gold = np.array([CHOICES[e.label] for e in examples])
        predicted = np.array([p["prediction"] for p in predictions])
        levels = np.array([e.level for e in examples])
        result = {"accuracy": metrics.accuracy(gold, predicted)}
        for level in LEVELS:
            if (levels == level).any():
                result[f"accuracy_{level}"] = metrics.accuracy(
                    gold[levels == level], predicted[levels == level]
                )
        return result
