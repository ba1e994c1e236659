#!/usr/bin/env bash
# Fetches a SASS disassembler into .tools/ (git-ignored) for scripts/sass.py: the CUDA 13 toolkit
# here (/usr/local/cuda) ships nvcc and ptxas but no nvdisasm or cuobjdump. Debian's non-free
# nvidia-cuda-toolkit (CUDA 11.8, 84 MB .deb) has both; only nvdisasm is kept. apt runs with a
# private sources list and state under a temporary folder: the machine's apt configuration is not
# changed and nothing is installed.
#   bash scripts/get-nvdisasm.sh        -> .tools/nvdisasm
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/.tools
[[ -x $dest/nvdisasm ]] && { echo "$dest/nvdisasm is there"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$dest"
echo "deb http://deb.debian.org/debian bookworm non-free contrib" >"$tmp/sources.list"
apt_opts=(-o "Dir::Etc::sourcelist=$tmp/sources.list" -o "Dir::Etc::sourceparts=-"
  -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache")
apt-get "${apt_opts[@]}" update -qq
(cd "$tmp" && apt-get "${apt_opts[@]}" download nvidia-cuda-toolkit 2>/dev/null)
dpkg -x "$tmp"/nvidia-cuda-toolkit_*.deb "$tmp/x"
cp "$tmp/x/usr/bin/nvdisasm" "$dest/nvdisasm"
echo "$dest/nvdisasm: $("$dest/nvdisasm" --version | tail -1)"
