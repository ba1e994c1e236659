#!/usr/bin/env bash
# The README's first command: install what is missing, build, make the tiny synthetic step35
# model and show it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
model=${MODEL:-build/tiny.gguf}
./build/server/stepserve make-model --preset tiny --out "$model"
./build/server/stepserve gguf inspect "$model"
