#!/usr/bin/env bash
# What only a GPU machine can show, in one run: the GPU workers' hash-locked environment
# installs and imports, FAISS on the GPU, and verl's trainer running advrag's plugin end to end
# (estimators, loss, rewards, the Search-R1 agent loop against advrag's retrieval server) for
# two updates of configs/train.yaml, its checkpoint merged back and registered, then two updates
# of configs/rex-rag.yaml (REX-RAG's probes in the agent loop, its filter and correction in
# verl's V1 trainer, every probe opened: probe_prob 1).
#
#   bash bench/gpu_smoke.sh            # from the repository root, on a machine with a GPU
#
# Needs: an NVIDIA GPU with its driver, Python 3.12 (the lock's; PYTHON names another
# interpreter), network to PyPI (it installs infra/worker/requirements.lock, as the workers
# do, into .venv-gpu), about 20 minutes. Writes bench/results/gpu_smoke.json: each check's
# outcome and seconds, the GPU's name, and the versions used. Exits non-zero at the first
# failed check, with that check named.
set -euo pipefail

PYTHON=${PYTHON:-python3.12}
VENV=.venv-gpu
OUT=bench/results/gpu_smoke.json
RUN_DIR=.cache/advrag/gpu-smoke
PORT=8077
declare -A SECONDS_TAKEN=()

fail() { echo "gpu_smoke: FAILED at $1" >&2; exit 1; }

timed() {  # timed NAME COMMAND...: run COMMAND, record its seconds under NAME
  local name=$1 start
  shift
  start=$(date +%s)
  "$@" || fail "$name"
  SECONDS_TAKEN[$name]=$(( $(date +%s) - start ))
  echo "gpu_smoke: $name ok (${SECONDS_TAKEN[$name]} s)"
}

check_gpu() { nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; }

install() {  # what the GPU workers install: the hash-locked set, then advrag alone
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --require-hashes --no-deps -r infra/worker/requirements.lock
  "$VENV/bin/pip" install -q --no-deps --no-build-isolation -e .
}

faiss_on_gpu() {  # the index builds on the GPU and answers as the CPU index does
  "$VENV/bin/python" - <<'PY'
import numpy as np
from advrag.retrieval.index import build_index
vectors = np.random.default_rng(0).normal(size=(20000, 384)).astype(np.float32)
vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
gpu = build_index(vectors, "flat", gpu=True, progress=False)
cpu = build_index(vectors, "flat", gpu=False, progress=False)
assert gpu.gpu_resources is not None
assert (gpu.search(vectors[:64], 10)[1] == cpu.search(vectors[:64], 10)[1]).all()
print("faiss: flat index on the GPU, the same neighbours as on the CPU")
PY
}

demo_data() { "$VENV/bin/advrag" prepare-data; }  # the demo's world and its index

start_retriever() {
  "$VENV/bin/advrag" serve-retriever --port "$PORT" > "$RUN_DIR/retriever.log" 2>&1 &
  RETRIEVER_PID=$!
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && return 0
    sleep 1
  done
  return 1
}

verl_two_updates() {
  "$VENV/bin/advrag" rl --config configs/train.yaml --engine verl --gpus 1 \
    --retriever-url "http://127.0.0.1:$PORT" --out-dir "$RUN_DIR" \
    --set steps=2 --set checkpoint_every=2 --set warmup=null
  ls .cache/advrag/checkpoints/train/verl > /dev/null  # configs/train.yaml's, /verl
  ls .cache/advrag/checkpoints/train/verl-export/step-2/config.json > /dev/null  # merged back
}

verl_rex_rag() {
  "$VENV/bin/advrag" rl --config configs/rex-rag.yaml --engine verl --gpus 1 \
    --retriever-url "http://127.0.0.1:$PORT" --out-dir "$RUN_DIR/rex-rag" \
    --set steps=2 --set checkpoint_every=2 --set warmup=null --set exploration.probe_prob=1.0
  ls .cache/advrag/checkpoints/rex-rag/verl/global_step_2/advrag_rex.json > /dev/null
  ls .cache/advrag/checkpoints/rex-rag/verl-export/step-2/config.json > /dev/null
}
write_results() {
  local gpu versions
  gpu=$(check_gpu | head -1)
  versions=$("$VENV/bin/python" -c 'import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in ("advrag", "verl", "vllm", "torch", "faiss-gpu-cu12")}))')
  {
    printf '{"gpu": "%s", "versions": %s, "seconds": {' "$gpu" "$versions"
    local first=1 name
    for name in "${!SECONDS_TAKEN[@]}"; do
      [ $first -eq 1 ] || printf ', '
      printf '"%s": %s' "$name" "${SECONDS_TAKEN[$name]}"
      first=0
    done
    printf '}, "passed": true}\n'
  } > "$OUT"
  echo "gpu_smoke: all checks passed; $OUT"
}

mkdir -p "$RUN_DIR"
RETRIEVER_PID=
trap '[ -n "$RETRIEVER_PID" ] && kill "$RETRIEVER_PID" 2> /dev/null || true' EXIT
timed gpu check_gpu
timed install install
timed faiss_on_gpu faiss_on_gpu
timed demo_data demo_data
timed retriever start_retriever
timed verl_two_updates verl_two_updates
timed verl_rex_rag verl_rex_rag
write_results
