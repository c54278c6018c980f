#!/usr/bin/env bash
# Make sure the pinned MLflow tracking server is installed in a virtualenv of its own
# (.run/mlflow-venv), never in the project's: MLflow brings hundreds of packages (Flask,
# SQLAlchemy, pandas, ...) that workflow-manager does not ship and must not be tested against.
# Tests (tests/conftest.py, `mlflow_server`) and the demo start it from there (sim/mlflow.py).
# Idempotent: does nothing when the pinned version is already there.
#
# The version is pinned: MLflow's auth API changed in 3.14 (per-user grants moved to
# /api/3.0/mlflow/users/permissions/*), and our administrator calls are written and tested
# against this one (docs/operations.md, "Experiment tracking").
set -euo pipefail

MLFLOW_VERSION="3.17.2"
cd "$(dirname "$0")/.."
VENV=.run/mlflow-venv
STAMP="$VENV/.installed-$MLFLOW_VERSION"
PY=${PY:-python3}

if [ -f "$STAMP" ] && [ -x "$VENV/bin/mlflow" ]; then
  exit 0
fi
echo "installing MLflow $MLFLOW_VERSION (with its auth extra) into $VENV" >&2
rm -rf "$VENV"
mkdir -p .run
"$PY" -m venv "$VENV"
if ! "$VENV/bin/pip" install -q "mlflow[auth]==$MLFLOW_VERSION" >"$VENV/install.log" 2>&1; then
  grep -v "is ignored" "$VENV/install.log" >&2 || true
  echo "MLflow $MLFLOW_VERSION could not be installed (log: $VENV/install.log)" >&2
  exit 1
fi
"$VENV/bin/mlflow" --version >/dev/null
touch "$STAMP"
echo "MLflow $MLFLOW_VERSION is installed in $VENV" >&2
