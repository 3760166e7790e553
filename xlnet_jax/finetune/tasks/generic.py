"""Your own labels: `classification` and `regression` from plain tab-separated files.

--data_dir holds train.tsv and dev.tsv (test.tsv optional), no header, one example a line:
LABEL<TAB>TEXT or LABEL<TAB>TEXT_A<TAB>TEXT_B (every line of a run the same). test.tsv
lines have the same texts without the label. The classes are the labels of train.tsv,
sorted; a label of dev.tsv that train.tsv lacks is an error. Texts longer than seq_len are
read through the recurrence memory (config.num_segments).
"""

from xlnet_jax import paths
from xlnet_jax.errors import DataError
from xlnet_jax.finetune import tsv
from xlnet_jax.finetune.tasks.pair import PairExample, PairTask

_FILES = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
_LAYOUT = "LABEL<TAB>TEXT or LABEL<TAB>TEXT_A<TAB>TEXT_B lines"


class GenericTask(PairTask):
    """Your own labelled pairs; `head` picks classification or regression."""

    test_splits = ("test",)

    def has_split(self, data_dir: str, split: str) -> bool:
        return (paths.as_path(data_dir) / _FILES[split]).is_file()

    def _columns(self, data_dir: str) -> int:
        """2 or 3: the column count of train.tsv's first line."""
        path = paths.as_path(data_dir) / _FILES["train"]
        _, rows = tsv.read_rows(str(path), header=False, columns=None, what=_LAYOUT)
        count = len(rows[0].fields)
        if count not in (2, 3):
            raise DataError(f"{rows[0].where}: {count} tab-separated columns, expected {_LAYOUT}")
        return count

    def labels(self, data_dir: str) -> list[str]:
        if self.regression:
            return ["score"]
        return sorted({example.label for example in self.read(data_dir, "train", check=False)})

    def read(self, data_dir: str, split: str, check: bool = True) -> list[PairExample]:
        """The split's examples; check=False skips the label check (reading the classes)."""
        path = str(paths.as_path(data_dir) / _FILES[split])
        columns = self._columns(data_dir) - (split == "test")
        what = _LAYOUT if split != "test" else "the texts of train.tsv's lines, without labels"
        _, rows = tsv.read_rows(path, header=False, columns=columns, what=what)
        known = set(self.labels(data_dir)) if check and split != "train" else None
        examples = []
        for position, row in enumerate(rows):
            fields = row.fields if split == "test" else row.fields[1:]
            label = None if split == "test" else row.fields[0].strip()
            if label is not None and self.regression:
                try:
                    label = float(label)
                except ValueError:
                    raise DataError(f"{row.where}: score {label!r} is not a number") from None
            elif label is not None and known is not None and label not in known:
                raise DataError(
                    f"{row.where}: label {label!r} does not occur in train.tsv "
                    f"(its labels: {sorted(known)})"
                )
            text_b = fields[1] if len(fields) == 2 else None
            examples.append(PairExample(str(position), fields[0], text_b, label, row.where))
        return examples


class Classification(GenericTask):
    name, head = "classification", "classification"


class Regression(GenericTask):
    name, head = "regression", "regression"
