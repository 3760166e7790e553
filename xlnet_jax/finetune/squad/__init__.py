"""SQuAD-format reading comprehension as the original XLNet's `run_squad` does it.

reading: the json files (SQuAD 1.1 / 2.0, CMRC 2018, DRCD, KorQuAD), checked.
offsets: characters of the original text <-> SentencePiece pieces, through our normalisation.
windows: paragraph <sep> question <sep> <cls> windows with a document stride, and labels.
postprocess: n-best spans across windows, null odds, the prediction files.
metric: the official evaluate-v2.0 figures (CJK text scored by characters).
hf_outputs: the windows through transformers' tokenizer, XLNetForQuestionAnswering's outputs
  to the same answers and null odds.
"""
