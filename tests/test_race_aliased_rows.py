"""config.race_rows "aliased": the original's RACE rows, list aliasing included
(zihangdai/xlnet run_race:189, `tokens = tokens_context`; zihangdai/xlnet#204).

The reference is a short transcription of the row-building loop of the original's
convert_single_example (run_race), run on random articles and options: while article +
option fits, the article list itself is the row and grows by it. Ours pads with <pad> where
the original pads with 0 (a named departure; the mask hides either), so padding is compared
through the mask.
"""

import ml_collections
import numpy as np
import pytest

from xlnet_jax.data.tokenizer import CLS_ID, SEP_ID
from xlnet_jax.errors import ConfigError
from xlnet_jax.finetune.registry import get_task
from xlnet_jax.finetune.tasks.race import RaceExample, aliased_rows

SEG_ID_A, SEG_ID_B, SEG_ID_CLS, SEG_ID_PAD = 0, 1, 2, 4  # the original's classifier_utils


def _original_rows(tokens_context, qa_list, max_seq_length, max_qa_length):
    """run_race's convert_single_example, its row loop transcribed (tokens for text)."""
    input_ids, input_mask, all_seg_ids = [], [], []
    for i in range(len(qa_list)):
        tokens_qa = qa_list[i]
        if len(tokens_qa) > max_qa_length:
            tokens_qa = tokens_qa[-max_qa_length:]
        if len(tokens_context) + len(tokens_qa) > max_seq_length - 3:
            tokens = tokens_context[: max_seq_length - 3 - len(tokens_qa)]
        else:
            tokens = tokens_context
        segment_ids = [SEG_ID_A] * len(tokens)
        tokens.append(SEP_ID)
        segment_ids.append(SEG_ID_A)
        tokens.extend(tokens_qa)
        segment_ids.extend([SEG_ID_B] * len(tokens_qa))
        tokens.append(SEP_ID)
        segment_ids.append(SEG_ID_B)
        tokens.append(CLS_ID)
        segment_ids.append(SEG_ID_CLS)
        cur_input_ids = tokens
        cur_input_mask = [0] * len(cur_input_ids)
        if len(cur_input_ids) < max_seq_length:
            delta_len = max_seq_length - len(cur_input_ids)
            cur_input_ids = [0] * delta_len + cur_input_ids
            cur_input_mask = [1] * delta_len + cur_input_mask
            segment_ids = [SEG_ID_PAD] * delta_len + segment_ids
        input_ids.append(cur_input_ids)
        input_mask.append(cur_input_mask)
        all_seg_ids.append(segment_ids)
    return np.array(input_ids), np.array(all_seg_ids), np.array(input_mask, bool)


def test_aliased_rows_equal_the_originals_on_random_cases():
    rng = np.random.default_rng(0)
    grew = cut = 0
    for _ in range(500):
        seq_len = int(rng.integers(8, 40))
        max_qa = int(rng.integers(1, seq_len - 3))
        article = list(rng.integers(10, 100, int(rng.integers(0, 2 * seq_len))))
        qas = [list(rng.integers(10, 100, int(rng.integers(1, 2 * max_qa)))) for _ in range(4)]
        want_ids, want_seg, want_mask = _original_rows(list(article), qas, seq_len, max_qa)
        ids, seg, mask = aliased_rows(article, [qa[-max_qa:] for qa in qas], seq_len)
        assert ids.shape == (1, 4, seq_len)
        np.testing.assert_array_equal(mask[0], want_mask)
        np.testing.assert_array_equal(seg[0], want_seg)
        np.testing.assert_array_equal(np.where(mask[0], 0, ids[0]), want_ids)
        grew += int((~want_mask[1]).sum() > len(article) + len(qas[1][-max_qa:]) + 3)
        cut += int(len(article) + len(qas[0][-max_qa:]) > seq_len - 3)
    assert grew > 50 and cut > 50  # both branches, and the aliasing, are exercised


class _Encoder:
    """One id per word (from 10, past XLNet's special ids)."""

    words = "the cat dog sat on a mat which one _".split()

    def encode_many(self, texts):
        return [[10 + self.words.index(w) for w in text.split()] for text in texts]


def _featurize(race_rows: str, num_segments: int = 1):
    config = ml_collections.ConfigDict(
        {"seq_len": 32, "num_segments": num_segments, "max_qa_length": 6, "race_rows": race_rows}
    )
    example = RaceExample("m/1.txt:0", "the cat sat", "which one _", ("cat", "dog", "mat", "a"),
                          1, "middle")  # fmt: skip
    return get_task("race").featurize([example], _Encoder(), config, []).arrays


def test_the_option_builds_the_originals_rows_and_the_default_fresh_ones():
    aliased, fresh = _featurize("aliased"), _featurize("fresh")
    article, qas = [10, 11, 13], [[17, 18, 11], [17, 18, 12], [17, 18, 16], [17, 18, 15]]
    want_ids, _, want_mask = _original_rows(list(article), qas, 32, 6)
    np.testing.assert_array_equal(aliased["input_mask"][0, 0], want_mask)
    np.testing.assert_array_equal(np.where(want_mask, 0, aliased["input_ids"][0, 0]), want_ids)
    # fresh: option 3's row is the article and option 3 alone; aliased: options 0..2 as well
    kept = fresh["input_ids"][0, 0, 3][~fresh["input_mask"][0, 0, 3]]
    assert list(kept) == [*article, SEP_ID, *qas[3], SEP_ID, CLS_ID]
    assert (~aliased["input_mask"][0, 0, 3]).sum() == len(kept) + 3 * (len(qas[0]) + 3)


def test_aliased_rows_with_segments_is_one_line():
    with pytest.raises(ConfigError) as error:
        _featurize("aliased", num_segments=2)
    assert "\n" not in str(error.value)
    assert str(error.value).startswith('config.race_rows: "aliased"')
