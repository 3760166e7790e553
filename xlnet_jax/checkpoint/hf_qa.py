"""The SQuAD head's HF names: XLNetForQuestionAnswering's state-dict keys for our QAHead.

Our QAHead (model/qa_head.py, under "qa_head" in the task's network) names its submodules
as HF's poolers, so the mapping is a renaming plus torch's transposed Linear weights.
"""

# HF key -> (our path in the fine-tuned model's params, torch Linear weight: transposed?).
QA_HEAD_KEYS = {
    "start_logits.dense.weight": (("qa_head", "start_logits", "dense", "kernel"), True),
    "start_logits.dense.bias": (("qa_head", "start_logits", "dense", "bias"), False),
    "end_logits.dense_0.weight": (("qa_head", "end_logits", "dense_0", "kernel"), True),
    "end_logits.dense_0.bias": (("qa_head", "end_logits", "dense_0", "bias"), False),
    "end_logits.LayerNorm.weight": (("qa_head", "end_logits", "layer_norm", "scale"), False),
    "end_logits.LayerNorm.bias": (("qa_head", "end_logits", "layer_norm", "bias"), False),
    "end_logits.dense_1.weight": (("qa_head", "end_logits", "dense_1", "kernel"), True),
    "end_logits.dense_1.bias": (("qa_head", "end_logits", "dense_1", "bias"), False),
    "answer_class.dense_0.weight": (("qa_head", "answer_class", "dense_0", "kernel"), True),
    "answer_class.dense_0.bias": (("qa_head", "answer_class", "dense_0", "bias"), False),
    "answer_class.dense_1.weight": (("qa_head", "answer_class", "dense_1", "kernel"), True),
}
