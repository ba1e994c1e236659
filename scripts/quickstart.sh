#!/usr/bin/env bash
# The README's first command: install what is missing, build, make the tiny synthetic step35
# model and show it; then serve it over gRPC, stream one reply with `stepserve client`, and stop
# the server (SIGTERM: drain, exit 0).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
bin=./build/server/stepserve
model=${MODEL:-build/tiny.gguf}
"$bin" make-model --preset tiny --out "$model"
"$bin" gguf inspect "$model"

if ! "$bin" help | grep -q '^ *serve'; then
  echo "quickstart: this build has no 'stepserve serve' (gRPC or the engine loop missing)" >&2
  exit 0
fi
port=${PORT:-50051}
log=build/quickstart-serve.log
"$bin" serve --model "$model" --listen "127.0.0.1:$port" --metrics-listen 127.0.0.1:0 \
  --temperature 0 2>"$log" &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  if grep -q 'stepserve: ready' "$log"; then break; fi
  if ! kill -0 "$server" 2>/dev/null; then cat "$log" >&2; exit 1; fi
  sleep 0.1
done
"$bin" client --target "127.0.0.1:$port" --health readiness
"$bin" client --target "127.0.0.1:$port" --prompt "Once upon a time" --max-tokens 24
echo
kill -TERM "$server"
wait "$server"
trap - EXIT
echo "quickstart: server stopped cleanly (log: $log)"
