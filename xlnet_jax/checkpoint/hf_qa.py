"""The SQuAD head's parameters under HF XLNetForQuestionAnswering's state-dict names.

Our QAHead (model/qa_head.py) names its submodules as HF's poolers, so the mapping is a
renaming plus torch's transposed Linear weights. `head_to_hf` and `head_from_hf` are exact
inverses on every key listed here.
"""

from collections.abc import Mapping

import numpy as np
from flax import traverse_util

from xlnet_jax.errors import HFFormatError

# HF key -> (our path in the head's params, torch Linear weight: transposed?).
QA_HEAD_KEYS = {
    "start_logits.dense.weight": (("start_logits", "dense", "kernel"), True),
    "start_logits.dense.bias": (("start_logits", "dense", "bias"), False),
    "end_logits.dense_0.weight": (("end_logits", "dense_0", "kernel"), True),
    "end_logits.dense_0.bias": (("end_logits", "dense_0", "bias"), False),
    "end_logits.LayerNorm.weight": (("end_logits", "layer_norm", "scale"), False),
    "end_logits.LayerNorm.bias": (("end_logits", "layer_norm", "bias"), False),
    "end_logits.dense_1.weight": (("end_logits", "dense_1", "kernel"), True),
    "end_logits.dense_1.bias": (("end_logits", "dense_1", "bias"), False),
    "answer_class.dense_0.weight": (("answer_class", "dense_0", "kernel"), True),
    "answer_class.dense_0.bias": (("answer_class", "dense_0", "bias"), False),
    "answer_class.dense_1.weight": (("answer_class", "dense_1", "kernel"), True),
}


def head_to_hf(params: Mapping) -> dict[str, np.ndarray]:
    """The QAHead's params as HF state-dict entries (float32 numpy)."""
    flat = traverse_util.flatten_dict(params)
    out = {}
    for key, (path, transpose) in QA_HEAD_KEYS.items():
        value = np.asarray(flat[path], np.float32)
        out[key] = value.T if transpose else value
    return out


def head_from_hf(state: Mapping[str, np.ndarray], source: str = "HF state dict") -> dict:
    """The QAHead's params from HF state-dict entries; HFFormatError naming a missing key."""
    flat = {}
    for key, (path, transpose) in QA_HEAD_KEYS.items():
        if key not in state:
            raise HFFormatError(
                f"{source}: no {key!r}; not an XLNetForQuestionAnswering state dict."
            )
        value = np.asarray(state[key], np.float32)
        flat[path] = value.T if transpose else value
    return traverse_util.unflatten_dict(flat)
