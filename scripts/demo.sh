#!/usr/bin/env bash
# Quick-start command 1: install into ./.venv, prepare the built-in corpus (the standard
# library's docstrings), train the tiny config on CPU for a few minutes, evaluate it.
# Leaves demo/corpus, demo/run/checkpoints, demo/run/metrics.jsonl and TensorBoard logs.
# Rerunning resumes the run; delete demo/ to start over.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/venv.sh ""
if [ ! -f demo/corpus/manifest.json ]; then
  .venv/bin/xlnet-jax prepare --out demo/corpus --vocab_size 2000
fi
.venv/bin/xlnet-jax train --config configs/tiny.py --workdir demo/run \
  --config.corpus_dir demo/corpus "$@"
.venv/bin/xlnet-jax eval --workdir demo/run   # with the run's own config (config.json)
echo "TensorBoard: .venv/bin/tensorboard --logdir demo/run/tensorboard"
