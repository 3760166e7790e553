#!/usr/bin/env bash
# CI's GPU-compile leg: the whole base train step compiled for an H100 on this CPU, through
# XLA's GPU pipeline (tests_gpu/). jax's CUDA plugin lives in its own venv, ./.venv-gpu, so
# the main suite never sees it; only the plugin and its PJRT library are added to the
# test-core extra (no CUDA libraries: a compile loads no cuDNN or cuBLAS), at the versions of
# scripts/constraints/py3XY.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-gpu scripts/venv.sh test-core
version=$(.venv-gpu/bin/python -c 'import sys; print("%d%d" % sys.version_info[:2])')
.venv-gpu/bin/pip install --quiet --disable-pip-version-check \
  -c "scripts/constraints/py$version.txt" jax-cuda12-plugin jax-cuda12-pjrt
[ -n "${INSTALL_ONLY:-}" ] && exit 0  # .ci/run installs every leg first, side by side
.venv-gpu/bin/python -m pytest -q -n 0 tests_gpu "$@"
