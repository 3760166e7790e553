#!/usr/bin/env bash
# Creates ./.venv (Python 3.11) if missing and installs the project with the given extras.
# Usage: scripts/venv.sh EXTRAS   (e.g. "test,tpu"); prints nothing on success but pip's errors.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
  .venv/bin/pip install --quiet --upgrade pip
fi
spec="."; [ -n "${1:-}" ] && spec=".[${1}]"
.venv/bin/pip install --quiet --disable-pip-version-check -e "$spec"
