#!/usr/bin/env bash
# Creates a virtual environment (./.venv, or $VENV) if missing and installs the project with
# the given extras, at the exact versions of scripts/constraints/py3XY.txt for its Python.
# Usage: scripts/venv.sh EXTRAS   (e.g. "test,tpu"); prints nothing on success but pip's errors.
# PYTHON picks the interpreter; by default the first Python 3.11-3.13 of python3, python3.13,
# python3.12, python3.11 on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
supported='import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))'
if [ ! -x "$VENV/bin/python" ]; then
  if [ -z "${PYTHON:-}" ]; then
    for candidate in python3 python3.13 python3.12 python3.11; do
      if "$candidate" -c "$supported" 2>/dev/null; then PYTHON="$candidate"; break; fi
    done
  fi
  if [ -z "${PYTHON:-}" ] || ! "$PYTHON" -c "$supported" 2>/dev/null; then
    echo "scripts/venv.sh: needs Python 3.11, 3.12 or 3.13 (found ${PYTHON:-none of" \
      "python3, python3.13, python3.12, python3.11}); set PYTHON=/path/to/python3.12" >&2
    exit 1
  fi
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --upgrade pip
fi
version=$("$VENV/bin/python" -c 'import sys; print("%d%d" % sys.version_info[:2])')
constraints="scripts/constraints/py$version.txt"
pin=(-c "$constraints")
if [ ! -f "$constraints" ]; then
  echo "scripts/venv.sh: no $constraints: installing the newest versions setup.py allows" >&2
  pin=()
fi
spec="."; [ -n "${1:-}" ] && spec=".[${1}]"
# Done already for these extras, setup.py and pins: nothing to install (a rerun is instant).
stamp="$spec $(cat setup.py "${pin[@]:1}" | sha256sum | cut -c1-16)"
[ "$(cat "$VENV/.xlnet-jax-installed" 2>/dev/null)" = "$stamp" ] && exit 0
"$VENV/bin/pip" install --quiet --disable-pip-version-check "${pin[@]}" -e "$spec"
echo "$stamp" >"$VENV/.xlnet-jax-installed"
