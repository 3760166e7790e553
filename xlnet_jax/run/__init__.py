"""What checks and owns a run before and while it trains.

  fields.py, validate.py  per-field and relational config checks (one line each)
  preflight.py            corpus, manifest and config checks before compiling
  workdir.py, lease.py    the workdir and its single-writer lease
  fence.py                no write of the run outlives its lease
  init_from.py            params from HF weights, an import or another run
  flags.py                train's and finetune's flags, declared once (cli, launch)
May import checkpoint, objective, model, data and the base modules.
"""
