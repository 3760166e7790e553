"""Whether transformers' AutoTokenizer, loaded from an export, gives a fine-tuning run's ids.

`xlnet-jax export-hf WORKDIR --out DIR --data_dir DATA` compares, on the run's own train
and dev text, each row as the run built it (finetune/features.py: A <sep> B <sep> <cls>, cut
to the row's capacity, and its token types) with AutoTokenizer's row of the same text
(`truncation="longest_first"` to the same length), and names the cause of each row that
differs, checked in this order:
  * digit-comma split: ours applies the original's (data/tokenizer.py); transformers 5's
    tokenizers cannot express it (transformers 4's slow XLNetTokenizer did);
  * out-of-vocabulary Hangul syllable: HF spells Hangul in jamo (hf_tokenizer.py), so an
    unknown syllable becomes a known first part and <unk> where ours gives one <unk>;
  * other piece boundaries: the first piece where the texts' pieces part, shown;
  * pair truncation: the texts' pieces agree, the cut does not. Ours is the original's
    (`_truncate_seq_pair`: the longer text loses its last piece, B on a tie); HF's
    longest_first cuts both to half the room when both are longer, A the smaller half.
SQuAD's windows are the run's own layout (windows.py); there each paragraph and question is
compared as a whole text, without truncation.
"""

import collections
import dataclasses
import json
import unicodedata

from xlnet_jax import paths
from xlnet_jax.checkpoint.hf import FINETUNE_FILE, TOKENIZER_FILE
from xlnet_jax.data import tokenizer
from xlnet_jax.data.normalize import normalize
from xlnet_jax.finetune.features import pair_row
from xlnet_jax.finetune.registry import get_task
from xlnet_jax.finetune.text import TextEncoder
from xlnet_jax.training import run_config

_HANGUL = ("\uac00", "\ud7a3")
DIGIT_COMMA = "digit-comma split (transformers 5 has none)"
HANGUL = "out-of-vocabulary Hangul syllable (HF: its jamo, ours: one <unk>)"
PIECES = "other piece boundaries"
TRUNCATION = "pair truncation (ours: the original's, HF: longest_first)"


@dataclasses.dataclass
class Agreement:
    """Rows compared, rows equal, and per cause the rows that differ and a first example."""

    rows: int = 0
    equal: int = 0
    causes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    examples: dict[str, str] = dataclasses.field(default_factory=dict)

    def add(self, cause: str | None, example: str = "") -> None:
        self.rows += 1
        if cause is None:
            self.equal += 1
            return
        self.causes[cause] += 1
        self.examples.setdefault(cause, example)

    def summary(self) -> str:
        """One line: the agreement, then each cause with its count and first example."""
        line = f"AutoTokenizer's ids equal the run's on {self.equal}/{self.rows} rows"
        differing = [
            f"{count} {cause} (e.g. {self.examples[cause]})"
            for cause, count in self.causes.most_common()
        ]
        return line + ("; differing: " + "; ".join(differing) if differing else "")


def compare_rows(
    hf_tokenizer,
    encoder: TextEncoder,
    rows: list[tuple[str, str | None]],
    capacity: int | None,
    agreement: Agreement,
) -> None:
    """Adds each (text A, text B or None) row to `agreement`: the run's row (cut to
    `capacity` pieces; None: not cut) against hf_tokenizer's. Texts go to both tokenizers in
    batches: single texts and pairs apart."""
    sp = tokenizer.load_processor(encoder.model_path)
    for group in ([r for r in rows if r[1] is None], [r for r in rows if r[1] is not None]):
        if not group:
            continue
        texts_a = [a for a, _ in group]
        texts_b = None if group[0][1] is None else [b for _, b in group]
        ours_a = encoder.encode_many(texts_a)
        ours_b = [None] * len(group) if texts_b is None else encoder.encode_many(texts_b)
        kwargs = {"truncation": "longest_first", "max_length": capacity} if capacity else {}
        hf = hf_tokenizer(texts_a, texts_b, return_token_type_ids=True, **kwargs)
        for n, ((a, b), ids_a, ids_b) in enumerate(zip(group, ours_a, ours_b, strict=True)):
            length = capacity or len(ids_a) + len(ids_b or []) + 3
            ids, types, mask = (x.ravel() for x in pair_row(ids_a, ids_b, length, 1))
            ours = (ids[~mask].tolist(), types[~mask].tolist())
            if ours == (hf["input_ids"][n], hf["token_type_ids"][n]):
                agreement.add(None)
            else:
                agreement.add(*_cause(hf_tokenizer, encoder, sp, [(a, ids_a), (b, ids_b)]))


def _cause(hf_tokenizer, encoder, sp, texts) -> tuple[str, str]:
    """(cause, example) of a differing row whose texts are (text, our ids) pairs."""
    for text, ours in texts:
        if text is None:
            continue
        theirs = hf_tokenizer(text, add_special_tokens=False)["input_ids"]
        if theirs == ours:
            continue
        plain = sp.encode(
            normalize(text, uncased=encoder.uncased, keep_accents=encoder.keep_accents)
        )
        if plain == theirs:
            split = [sp.id_to_piece(i) for i in plain if i not in ours]
            return DIGIT_COMMA, f"{split[:3]} in {text[:40]!r}"
        for c in text:
            if _HANGUL[0] <= c <= _HANGUL[1] and tokenizer.SPECIAL_IDS["<unk>"] in encoder.encode(
                c
            ):
                return HANGUL, repr(c)
        k = next(
            (k for k, (x, y) in enumerate(zip(ours, theirs, strict=False)) if x != y),
            min(len(ours), len(theirs)),
        )
        mine = [sp.id_to_piece(i) for i in ours[k : k + 3]]
        hf = hf_tokenizer.convert_ids_to_tokens(theirs[k : k + 3])
        hf = [unicodedata.normalize("NFC", p) for p in hf]
        return PIECES, f"ours {mine}, HF {hf} in {text[:40]!r}"
    return TRUNCATION, f"{len(texts[0][1])} + {len(texts[1][1])} pieces"


def check_export(workdir: str, export_dir: str, data_dir: str) -> str:
    """The Agreement's summary of AutoTokenizer from `export_dir` (export-hf of the
    fine-tuning `workdir`) with the run, on its task's train and eval splits in `data_dir`,
    rows as long as the run's (seq_len x num_segments)."""
    info = json.loads((paths.as_path(workdir) / FINETUNE_FILE).read_text())
    config = run_config.load(workdir)
    encoder = TextEncoder(str(paths.as_path(export_dir) / TOKENIZER_FILE), **info["normalization"])
    capacity = config.seq_len * config.get("num_segments", 1)
    agreement = check_run(export_dir, encoder, get_task(info["task"]), data_dir, capacity)
    if agreement is None:
        return f"token ids not checked: the {info['task']} task's examples are not text pairs"
    return agreement.summary()


def check_run(
    export_dir: str, encoder: TextEncoder, task, data_dir: str, capacity: int
) -> Agreement | None:
    """The Agreement of AutoTokenizer from `export_dir` with the run on `task`'s train and
    eval splits in `data_dir` (rows of `capacity` pieces); None for a task whose examples
    are neither text pairs nor SQuAD questions."""
    from transformers import AutoTokenizer

    with paths.local_copy(export_dir) as local:  # transformers opens local files only
        hf_tokenizer = AutoTokenizer.from_pretrained(local)
    agreement = Agreement()
    for split in ("train", *task.eval_splits):
        examples = task.read(data_dir, split)
        if examples and hasattr(examples[0], "text_a"):
            rows = [(e.text_a, e.text_b) for e in examples]
            compare_rows(hf_tokenizer, encoder, rows, capacity, agreement)
        elif examples and hasattr(examples[0], "context"):
            texts = dict.fromkeys(t for e in examples for t in (e.context, e.question))
            compare_rows(hf_tokenizer, encoder, [(t, None) for t in texts], None, agreement)
        elif examples:
            return None
    return agreement
