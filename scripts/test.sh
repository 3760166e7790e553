#!/usr/bin/env bash
# Quick-start command 2: install into ./.venv and run lint and the whole test suite on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/venv.sh "test,tpu"
.venv/bin/ruff check xlnet_jax configs tests benchmarks docs/hooks
# One pytest worker per core, and one more: many tests wait (on the runs they start, their
# signals, heartbeats, leases and slowed steps), and the spare worker's file takes the core a
# waiting worker leaves. A file runs whole in one worker, so module fixtures are built once;
# files are handed out in collection order, the longest first (tests/conftest.py).
# The 25 slowest tests are listed at the end: every CI log says where the suite's time goes.
workers=$(($(nproc) + 1))
.venv/bin/python -m pytest tests -q -n "$workers" --dist loadfile --no-loadscope-reorder \
  --durations=25 "$@"
