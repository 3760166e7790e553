#!/usr/bin/env bash
# CI's GPU-compile leg: the whole base train step compiled for an H100 on this CPU, through
# XLA's GPU pipeline (tests_gpu/). It runs in the main suite's ./.venv with jax's CUDA plugin
# and its PJRT library (no CUDA libraries: a compile loads no cuDNN or cuBLAS) installed
# apart, in ./.gpu-plugin (pip --target, at the versions of scripts/constraints/py3XY.txt),
# and put on this leg's path only: the main suite never sees the plugin.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/venv.sh "test,tpu"
version=$(.venv/bin/python -c 'import sys; print("%d%d" % sys.version_info[:2])')
constraints="scripts/constraints/py$version.txt"
stamp=$(grep -h '^jax-cuda12' "$constraints" | sha256sum | cut -c1-16)
if [ "$(cat .gpu-plugin/.installed 2>/dev/null)" != "$stamp" ]; then
  rm -rf .gpu-plugin
  .venv/bin/pip install --quiet --disable-pip-version-check --no-deps --target .gpu-plugin \
    -c "$constraints" jax-cuda12-plugin jax-cuda12-pjrt
  echo "$stamp" >.gpu-plugin/.installed
fi
[ -n "${INSTALL_ONLY:-}" ] && exit 0  # .ci/run installs every leg first, side by side
PYTHONPATH="$PWD/.gpu-plugin${PYTHONPATH:+:$PYTHONPATH}" .venv/bin/python -m pytest -q -n 0 tests_gpu "$@"
