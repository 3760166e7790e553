"""The GLUE tasks, read from their files exactly as the GLUE distribution lays them out.

Column positions as the original's run_classifier processors read them: CoLA's train and
dev have no header (label column 1, sentence 3), MNLI's texts are columns 8 and 9 with the
label last, STS-B's columns 7 and 8 with the score last, MRPC's label first with the strings
in 3 and 4; test files start with an index column and have no label. A header's text columns
are checked by name (case-insensitive), so another task's folder is named as such in one line.
Files are read by the reading rule (finetune/tsv.py). A line with too few columns is skipped
with a printed count, as the original's processors skip it; a score that is not a finite
number (nan, inf) is refused with its line.
"""

import dataclasses

from xlnet_jax import paths
from xlnet_jax.errors import DataError
from xlnet_jax.finetune import tsv
from xlnet_jax.finetune.tasks.pair import PairExample, PairTask, finite_score


@dataclasses.dataclass(frozen=True)
class Columns:
    """Where one kind of file (train/dev, or test) keeps what.

    text_a, text_b, label, index: column positions (label -1: the last); None: absent.
    header: whether line 1 names the columns; columns: the count without a header.
    names: column -> the header's name for it (lower case), checked on reading.
    """

    text_a: int
    text_b: int | None = None
    label: int | None = None
    index: int | None = None
    header: bool = True
    columns: int | None = None
    names: tuple[tuple[int, str], ...] = ()


class GlueTask(PairTask):
    """A GLUE task. Class attributes beyond PairTask's:

    glue_name: the benchmark's spelling (messages, the submission file).
    files: split -> file name in --data_dir.
    gold_columns, test_columns: the Columns of train/dev files and of test files (not
      `labelled`, which is Task.labelled()).
    label_names: the labels as the files write them (() for regression).
    submissions: test split -> the leaderboard's file name for it.
    """

    glue_name: str
    files: dict[str, str]
    gold_columns: Columns
    test_columns: Columns
    label_names: tuple[str, ...] = ()
    test_splits = ("test",)
    submissions: dict[str, str] = {}

    def has_split(self, data_dir: str, split: str) -> bool:
        return split in self.files and (paths.as_path(data_dir) / self.files[split]).is_file()

    def labels(self, data_dir: str) -> list[str]:
        del data_dir
        return list(self.label_names) if self.label_names else ["score"]

    def read(self, data_dir: str, split: str) -> list[PairExample]:
        path = str(paths.as_path(data_dir) / self.files[split])
        spec = self.test_columns if split in self.test_splits else self.gold_columns
        what = f"GLUE's {self.glue_name} {split} file"
        names, rows = tsv.read_rows(
            path, header=spec.header, columns=spec.columns, what=what, skip_short=True
        )
        for column, expected in spec.names:
            found = names[column].strip().lower() if column < len(names) else None
            if found != expected:
                raise DataError(
                    f"{path}:1: header column {column + 1} is {found!r}, expected {expected!r} "
                    f"as in {what}; is --data_dir the {self.glue_name} data "
                    f"(--task_name {self.name})?"
                )
        return [self._example(row, spec, position) for position, row in enumerate(rows)]

    def _example(self, row: tsv.Row, spec: Columns, position: int) -> PairExample:
        fields = row.fields
        label = None
        if spec.label is not None:
            label = fields[spec.label].strip()
            if self.regression:
                label = finite_score(label, row.where, f" ({self.glue_name})")
            elif label not in self.label_names:
                raise DataError(
                    f"{row.where}: label {label!r} is not one of {list(self.label_names)} "
                    f"({self.glue_name}); is --task_name {self.name} the right task?"
                )
        return PairExample(
            index=fields[spec.index].strip() if spec.index is not None else str(position),
            text_a=fields[spec.text_a],
            text_b=fields[spec.text_b] if spec.text_b is not None else None,
            label=label,
            where=row.where,
        )

    def submission_files(self, split: str, predictions: list[dict]) -> list[tuple[str, str]]:
        if split not in self.submissions:
            return []
        lines = ["index\tprediction"]
        for p in predictions:
            value = p["prediction"]
            lines.append(
                f"{p['index']}\t{value:.6f}" if self.regression else f"{p['index']}\t{value}"
            )
        return [(self.submissions[split], "\n".join(lines) + "\n")]


_STANDARD = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
_BINARY = ("0", "1")
_ENTAILMENT = ("entailment", "not_entailment")


class CoLA(GlueTask):
    name, glue_name, head, metric = "cola", "CoLA", "classification", "matthews"
    files, label_names, submissions = _STANDARD, _BINARY, {"test": "CoLA.tsv"}
    gold_columns = Columns(text_a=3, label=1, header=False, columns=4)
    test_columns = Columns(text_a=1, index=0, names=((1, "sentence"),))


class SST2(GlueTask):
    name, glue_name, head = "sst-2", "SST-2", "classification"
    files, label_names, submissions = _STANDARD, _BINARY, {"test": "SST-2.tsv"}
    gold_columns = Columns(text_a=0, label=1, names=((0, "sentence"), (1, "label")))
    test_columns = Columns(text_a=1, index=0, names=((1, "sentence"),))


class MRPC(GlueTask):
    name, glue_name, head, metric = "mrpc", "MRPC", "classification", "f1_accuracy"
    files, label_names, submissions = _STANDARD, _BINARY, {"test": "MRPC.tsv"}
    _names = ((3, "#1 string"), (4, "#2 string"))
    gold_columns = Columns(text_a=3, text_b=4, label=0, names=_names)
    test_columns = Columns(text_a=3, text_b=4, index=0, names=_names)


class STSB(GlueTask):
    name, glue_name, head = "sts-b", "STS-B", "regression"
    files, submissions = _STANDARD, {"test": "STS-B.tsv"}
    _names = ((7, "sentence1"), (8, "sentence2"))
    gold_columns = Columns(text_a=7, text_b=8, label=-1, names=_names)
    test_columns = Columns(text_a=7, text_b=8, index=0, names=_names)


class QQP(GlueTask):
    name, glue_name, head, metric = "qqp", "QQP", "classification", "f1_accuracy"
    files, label_names, submissions = _STANDARD, _BINARY, {"test": "QQP.tsv"}
    gold_columns = Columns(text_a=3, text_b=4, label=5, names=((3, "question1"), (4, "question2")))
    test_columns = Columns(text_a=1, text_b=2, index=0, names=((1, "question1"), (2, "question2")))


class MNLI(GlueTask):
    name, glue_name, head = "mnli", "MNLI", "classification"
    files = {
        "train": "train.tsv",
        "dev_matched": "dev_matched.tsv",
        "dev_mismatched": "dev_mismatched.tsv",
        "test_matched": "test_matched.tsv",
        "test_mismatched": "test_mismatched.tsv",
    }
    eval_splits = ("dev_matched", "dev_mismatched")
    test_splits = ("test_matched", "test_mismatched")
    submissions = {"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"}
    label_names = ("contradiction", "entailment", "neutral")
    _names = ((8, "sentence1"), (9, "sentence2"))
    gold_columns = Columns(text_a=8, text_b=9, label=-1, names=_names)
    test_columns = Columns(text_a=8, text_b=9, index=0, names=_names)


class QNLI(GlueTask):
    name, glue_name, head = "qnli", "QNLI", "classification"
    files, label_names, submissions = _STANDARD, _ENTAILMENT, {"test": "QNLI.tsv"}
    _names = ((1, "question"), (2, "sentence"))
    gold_columns = Columns(text_a=1, text_b=2, label=3, names=_names)
    test_columns = Columns(text_a=1, text_b=2, index=0, names=_names)


class RTE(GlueTask):
    name, glue_name, head = "rte", "RTE", "classification"
    files, label_names, submissions = _STANDARD, _ENTAILMENT, {"test": "RTE.tsv"}
    _names = ((1, "sentence1"), (2, "sentence2"))
    gold_columns = Columns(text_a=1, text_b=2, label=3, names=_names)
    test_columns = Columns(text_a=1, text_b=2, index=0, names=_names)


class WNLI(GlueTask):
    name, glue_name, head = "wnli", "WNLI", "classification"
    files, label_names, submissions = _STANDARD, _BINARY, {"test": "WNLI.tsv"}
    _names = ((1, "sentence1"), (2, "sentence2"))
    gold_columns = Columns(text_a=1, text_b=2, label=3, names=_names)
    test_columns = Columns(text_a=1, text_b=2, index=0, names=_names)


GLUE_TASKS = (CoLA, SST2, MRPC, STSB, QQP, MNLI, QNLI, RTE, WNLI)
