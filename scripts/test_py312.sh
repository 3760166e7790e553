#!/usr/bin/env bash
# CI's second leg: the core tests (model, PLM, the kernel in interpret mode, dropout, resume,
# sharding, auto's fallback, jax's deprecation) on the newest jax the package supports, on
# Python 3.12, in ./.venv312 at scripts/constraints/py312.txt's versions (the test-core extra:
# no torch, triton or libtpu; the HF parity and export tests, the sm_90 compile check and the
# TPU compiles run on the main leg, scripts/test.sh).
# PYTHON312 picks the interpreter; by default python3.12 on PATH, else pyenv's newest 3.12.
set -euo pipefail
cd "$(dirname "$0")/.."
is_312='import sys; sys.exit(sys.version_info[:2] != (3, 12))'
if [ -z "${PYTHON312:-}" ]; then
  for candidate in python3.12 \
      $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python 2>/dev/null | sort -rV); do
    if "$candidate" -c "$is_312" 2>/dev/null; then PYTHON312="$candidate"; break; fi
  done
fi
if [ -z "${PYTHON312:-}" ] || ! "$PYTHON312" -c "$is_312" 2>/dev/null; then
  tried="${PYTHON312:-python3.12 on PATH and ${PYENV_ROOT:-$HOME/.pyenv}/versions/3.12.*}"
  echo "scripts/test_py312.sh: no Python 3.12 (tried $tried); install one or set" \
    "PYTHON312=/path/to/python3.12" >&2
  exit 1
fi
PYTHON="$PYTHON312" VENV=.venv312 scripts/venv.sh test-core
[ -n "${INSTALL_ONLY:-}" ] && exit 0  # .ci/run installs every leg first, side by side
.venv312/bin/python -c 'import sys, jax; print(f"Python {sys.version.split()[0]}, jax {jax.__version__}")'
# One test of each kind where a file holds many alike (its other cases run on the main leg):
# the leg stays a few minutes on 2 cores.
core=(
  "tests/test_model_leakage.py::test_targets_see_neither_themselves_nor_later_targets[xla-0.0]"
  "tests/test_model_leakage.py::test_targets_see_neither_themselves_nor_later_targets[pallas_triton-0.1]"
  tests/test_model_errors.py tests/test_position.py
  tests/test_plm.py tests/test_attention_dropout.py
  "tests/test_attention_kernel.py::test_kernel_matches_xla[memory_two_segments-0.1]"
  tests/test_attention_kernel.py::test_model_through_kernel_matches_xla
  tests/test_attention_kernel.py::test_no_score_sized_array_on_kernel_path
  "tests/test_triton_kernel.py::test_triton_kernel_matches_xla[memory_two_segments-0.1]"
  tests/test_triton_kernel.py::test_train_step_exported_for_cuda_runs_the_triton_kernel
  tests/test_attention_fallback.py::test_auto_trains_on_xla_when_the_kernel_does_not_compile
  tests/test_attention_fallback.py::test_pallas_fails_loudly_when_the_kernel_does_not_compile
  tests/test_attention_fallback.py::test_auto_does_not_hide_other_compile_failures
  "tests/test_attention_fallback.py::test_a_wrong_kernel_is_not_trusted[flipped mask-auto]"
  tests/test_attention_fallback.py::test_the_check_fails_when_the_kernel_crashes_on_the_device
  tests/test_attention_fallback.py::test_no_check_where_the_kernel_runs_interpreted
  tests/test_pallas_triton_warning.py
  "tests/test_train_resume.py::test_sigkill_after_checkpoint_then_resume_is_bit_exact[whole]"
  tests/test_sharding_invariance.py::test_eight_devices_match_one_device
)
.venv312/bin/python -m pytest -q -n auto --dist loadfile --durations=10 "$@" "${core[@]}"
