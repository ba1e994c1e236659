#!/usr/bin/env bash
# Exercises helm/stepserve/files/fetch-model.sh against file:// URLs: success, resume of a partial
# file, skip of verified files, checksum mismatch, missing checksum. Usage: test-fetch-model.sh
set -euo pipefail
script="$(cd "$(dirname "$0")/../.." && pwd)/helm/stepserve/files/fetch-model.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src" "$work/dest"
head -c 300000 /dev/urandom > "$work/src/m-00001-of-00002.gguf"
head -c 100000 /dev/urandom > "$work/src/m-00002-of-00002.gguf"
(cd "$work/src" && sha256sum m-*.gguf > SHA256SUMS)

run() { BASE_URL="file://$work/src" DEST="$work/dest" RETRIES=0 "$@" sh "$script"; }
fail() { echo "test-fetch-model: FAIL: $*" >&2; exit 1; }
files=$'m-00001-of-00002.gguf\nm-00002-of-00002.gguf'

# A partial first shard must be completed, not restarted.
head -c 1000 "$work/src/m-00001-of-00002.gguf" > "$work/dest/m-00001-of-00002.gguf.part"
run env FILES="$files" 2> "$work/log1" || { cat "$work/log1"; fail "clean download"; }
cmp -s "$work/src/m-00001-of-00002.gguf" "$work/dest/m-00001-of-00002.gguf" || fail "shard 1 differs"
cmp -s "$work/src/m-00002-of-00002.gguf" "$work/dest/m-00002-of-00002.gguf" || fail "shard 2 differs"

run env FILES="$files" 2> "$work/log2" || { cat "$work/log2"; fail "second run"; }
grep -q "m-00001-of-00002.gguf: already present and verified" "$work/log2" || fail "no skip on rerun"

# Wrong explicit checksum wins over SHA256SUMS and fails clearly.
rm -f "$work/dest"/m-00002*
bad=$(printf '0%.0s' $(seq 64))
if run env FILES="m-00002-of-00002.gguf" CHECKSUMS="$bad  m-00002-of-00002.gguf" 2> "$work/log3"; then
  fail "mismatch accepted"
fi
grep -q "m-00002-of-00002.gguf: sha256 mismatch: expected $bad" "$work/log3" || fail "mismatch message: $(cat "$work/log3")"
[[ ! -e "$work/dest/m-00002-of-00002.gguf.part" ]] || fail "partial file kept after mismatch"

# No checksum at all: refused unless REQUIRE_CHECKSUM=0.
if run env FILES="m-00002-of-00002.gguf" SHA256SUMS_NAME="" 2> "$work/log4"; then fail "unchecked file accepted"; fi
grep -q "no checksum" "$work/log4" || fail "missing-checksum message: $(cat "$work/log4")"
run env FILES="m-00002-of-00002.gguf" SHA256SUMS_NAME="" REQUIRE_CHECKSUM=0 2> "$work/log5" || fail "REQUIRE_CHECKSUM=0"

# Unreachable file fails with its name.
if run env FILES="missing.gguf" CHECKSUMS="$bad  missing.gguf" 2> "$work/log6"; then fail "missing file accepted"; fi
grep -q "missing.gguf: download failed" "$work/log6" || fail "download-failure message: $(cat "$work/log6")"
echo "test-fetch-model: all cases passed"
