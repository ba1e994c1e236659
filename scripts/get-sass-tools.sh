#!/usr/bin/env bash
# Fetches the SASS dumpers into .tools/ (git-ignored) for scripts/sass.py: the CUDA 13 toolkit here
# (/usr/local/cuda) ships nvcc and ptxas but no cuobjdump or nvdisasm. Debian's non-free
# nvidia-cuda-toolkit (CUDA 11.8, 84 MB .deb) has both; they are copied out of it. apt runs with a
# private sources list and state under a temporary folder: the machine's apt configuration is not
# changed and nothing is installed.
#   bash scripts/get-sass-tools.sh        -> .tools/cuobjdump, .tools/nvdisasm
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/.tools
[[ -x $dest/cuobjdump && -x $dest/nvdisasm ]] && { echo "$dest: cuobjdump, nvdisasm there"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$dest"
echo "deb http://deb.debian.org/debian bookworm non-free contrib" >"$tmp/sources.list"
apt_opts=(-o "Dir::Etc::sourcelist=$tmp/sources.list" -o "Dir::Etc::sourceparts=-"
  -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache")
apt-get "${apt_opts[@]}" update -qq
(cd "$tmp" && apt-get "${apt_opts[@]}" download nvidia-cuda-toolkit 2>/dev/null)
dpkg -x "$tmp"/nvidia-cuda-toolkit_*.deb "$tmp/x"
cp "$tmp/x/usr/bin/cuobjdump" "$tmp/x/usr/bin/nvdisasm" "$dest/"
echo "$dest: $("$dest/cuobjdump" --version | tail -1)"
