#!/usr/bin/env bash
# The team's MLflow tracking server: runs, metrics and the model registry in PostgreSQL,
# artefacts in S3 (AWS or any S3-compatible store). docs/storage.md says how to run it.
#
#   mlflow/server.sh [ENV_FILE]     # ENV_FILE: default mlflow/server.env, read if it exists
#
# Every setting is an environment variable; mlflow/server.env.example lists them. The env
# file has one NAME=value per line, taken literally (no quotes, no $-expansion); a variable
# already set in the environment wins over the file.
set -euo pipefail

fail() {
  echo "mlflow/server.sh: $*" >&2
  exit 2
}

env_file=${1:-$(dirname "$0")/server.env}
if [[ -f $env_file ]]; then
  while IFS= read -r line || [[ -n $line ]]; do
    [[ $line =~ ^([A-Za-z_][A-Za-z0-9_]*)=(.*)$ ]] || continue
    [[ -v ${BASH_REMATCH[1]} ]] || export "${BASH_REMATCH[1]}=${BASH_REMATCH[2]}"
  done <"$env_file"
elif [[ $# -gt 0 ]]; then
  fail "no env file at $env_file"
fi

need() {  # need NAME EXAMPLE_VALUE
  [[ -n ${!1:-} ]] || fail "$1 is not set. Set it in $env_file or in the environment," \
    "e.g. $1=$2 (mlflow/server.env.example lists every setting)."
}
need MLFLOW_BACKEND_STORE_URI postgresql://mlflow@db.internal:5432/mlflow
need MLFLOW_ARTIFACTS_DESTINATION s3://my-bucket/mlflow
command -v mlflow >/dev/null || fail "mlflow is not on PATH: activate the project's venv," \
  "or pip install 'mlflow==3.17.*' psycopg2-binary boto3."

case ${MLFLOW_SERVE_ARTIFACTS:-true} in
  true) artifacts=(--serve-artifacts --artifacts-destination "$MLFLOW_ARTIFACTS_DESTINATION") ;;
  false) artifacts=(--no-serve-artifacts --default-artifact-root "$MLFLOW_ARTIFACTS_DESTINATION") ;;
  *) fail "MLFLOW_SERVE_ARTIFACTS=$MLFLOW_SERVE_ARTIFACTS: use true (clients send artefacts" \
    "through the server) or false (clients write to $MLFLOW_ARTIFACTS_DESTINATION themselves)." ;;
esac

export MLFLOW_DISABLE_TELEMETRY=${MLFLOW_DISABLE_TELEMETRY:-true} DO_NOT_TRACK=${DO_NOT_TRACK:-1}
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}

# Creates the tables in an empty database, migrates an older schema, else changes nothing.
mlflow db upgrade "$MLFLOW_BACKEND_STORE_URI"
exec mlflow server --backend-store-uri "$MLFLOW_BACKEND_STORE_URI" "${artifacts[@]}" \
  --host "${MLFLOW_HOST:-127.0.0.1}" --port "${MLFLOW_PORT:-5000}" --workers "${MLFLOW_WORKERS:-2}"
