#!/usr/bin/env bash
# Registers and spills of every kernel in one CUDA object of a CMake/Ninja build, from ptxas -v
# (the object is recompiled to a temporary file; the build tree is left as it was). With a second
# argument, a saved table of an earlier run: only kernels that are new or changed are printed.
#   scripts/ptxas-regs.sh BUILD_DIR/kernels/matmul/CMakeFiles/.../gemv_q8x_cuda.cu.o [OLD_TABLE]
#   > table.txt   (columns: registers, spill store bytes, spill load bytes, kernel)
# Why: a register cap or a new template instance that spills shows here before device time is
# spent; kernels that did not change must keep their registers (docs/cuda-engine.md).
set -euo pipefail
obj=$1 old=${2:-}
build=${obj%%/kernels/*}
[[ $build == "$obj" ]] && build=${obj%%/CMakeFiles/*}
rel=${obj#"$build"/}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmd=$(ninja -C "$build" -t commands "$rel" | tail -1)
cmd=${cmd/ -c / -Xptxas=-v -c }
cmd=${cmd/-o $rel/-o $tmp/out.o}
(cd "$build" && eval "$cmd") >"$tmp/ptxas.txt" 2>&1 || { cat "$tmp/ptxas.txt"; exit 1; }
python3 - "$tmp/ptxas.txt" "$old" <<'PY'
import re, subprocess, sys
rows, cur = {}, None
for line in open(sys.argv[1]):
    m = re.search(r"Compiling entry function '(\S+)'", line)
    if m:
        cur = m.group(1)
        rows[cur] = [0, 0, 0]
        continue
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m and cur:
        rows[cur][1:] = [int(m.group(1)), int(m.group(2))]
    m = re.search(r"Used (\d+) registers", line)
    if m and cur:
        rows[cur][0] = int(m.group(1))
names = list(rows)
demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                           text=True).stdout.splitlines()
old = {}
if sys.argv[2]:
    for line in open(sys.argv[2]):
        r, s, l, k = line.rstrip("\n").split("\t")
        old[k] = [int(r), int(s), int(l)]
for name, d in zip(names, demangled):
    # The anonymous namespace's per-file hash would make every kernel look new.
    key = re.sub(r"\(anonymous namespace\)::", "", d)
    if old and old.get(key) == rows[name]:
        continue
    print("\t".join(map(str, rows[name] + [key])))
PY
