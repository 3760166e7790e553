"""Data side: tokenizer, corpus preparation and the recurrent batch streams.

Text flows one way, one module per step:
  sources.py         inputs: text files and globs, a local tfds text dataset, or
                     builtin_corpus.py (the stdlib's docstrings)
  normalize.py       the original XLNet text normalisation
  tokenizer.py       SentencePiece with XLNet's special ids; training, checks, encoding
  document_keys.py   each document's key, split and tokenizer sample: hashes, no global draw
  reading.py         reading and normalising the inputs, the first pass of both engines
  prepare.py         prepare_corpus(): the three passes, writing a corpus directory
  beam_prepare.py    the same passes as an Apache Beam pipeline (the beam extra)
  shard_writer.py    the array_record shards and tfds metadata, written to local or gs://
                     through a local temporary file (either engine, any process)
  tfds_builder.py    the corpus as a tfds array_record dataset (no tensorflow)
  manifest.py        manifest.json, load_manifest(), manifest_fingerprint()
  corpus.py          a split as flat token / sentence-start arrays, cached as .npy
  streams.py         StreamBatcher: the batch of any step as a pure function of it
  batch_schema.py    the batch's fields, shapes and dtypes, shared with training
Errors the user can fix are errors.DataError. May import paths and errors only. Imports
are per module (this __init__ imports nothing), so tokenizer workers start without tfds.
"""
