#!/bin/sh
# Downloads model files into $DEST and verifies their SHA-256 (init container of the stepserve
# chart, model.source=download). POSIX sh: runs on busybox (curlimages/curl) and on dash.
#
# Environment:
#   BASE_URL          files are fetched from $BASE_URL/FILE
#   FILES             newline- or space-separated file names (relative, no "..")
#   DEST              target directory
#   SHA256SUMS_NAME   checksum file under BASE_URL in sha256sum format ("" = none)
#   CHECKSUMS         explicit "HEX  FILE" lines; take precedence over SHA256SUMS_NAME
#   REQUIRE_CHECKSUM  1 (default): a file without a checksum is an error
#   RETRIES           curl retries per file (default 10)
#   TOKEN_FILE        optional file holding a bearer token for the Authorization header
#
# Resumable: a file is downloaded to FILE.part with `curl --continue-at -`; once verified it is
# renamed to FILE and FILE.sha256 records the digest, so a restarted pod skips finished files.
set -eu

say() { printf 'fetch-model: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

: "${BASE_URL:?BASE_URL is required}"
: "${FILES:?FILES is required}"
: "${DEST:?DEST is required}"
SHA256SUMS_NAME=${SHA256SUMS_NAME-SHA256SUMS}
CHECKSUMS=${CHECKSUMS-}
REQUIRE_CHECKSUM=${REQUIRE_CHECKSUM:-1}
RETRIES=${RETRIES:-10}
TOKEN_FILE=${TOKEN_FILE-}

command -v curl >/dev/null 2>&1 || die "curl not found in the download image"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found in the download image"
[ -d "$DEST" ] || die "destination $DEST does not exist"
[ -w "$DEST" ] || die "destination $DEST is not writable (mount it read-write for the init container)"

base=${BASE_URL%/}
header_file=""
if [ -n "$TOKEN_FILE" ]; then
  [ -r "$TOKEN_FILE" ] || die "token file $TOKEN_FILE is not readable"
  header_file="$DEST/.fetch-auth-header"
  # The header goes through a file so the token never appears in the process list.
  printf 'Authorization: Bearer %s\n' "$(tr -d ' \r\n' < "$TOKEN_FILE")" > "$header_file"
  chmod 600 "$header_file"
  trap 'rm -f "$header_file"' EXIT
fi

fetch() {  # fetch URL OUTPUT [resume]
  set -- "$1" "$2" "${3:-}"
  if [ -n "$3" ]; then set -- "$@" --continue-at -; fi
  url=$1 out=$2
  shift 3
  if [ -n "$header_file" ]; then set -- "$@" --header "@$header_file"; fi
  curl --fail --location --silent --show-error --retry "$RETRIES" --retry-delay 5 \
    --retry-connrefused --connect-timeout 30 --output "$out" "$@" "$url"
}

sums="$DEST/.fetch-sha256sums"
: > "$sums"
if [ -n "$CHECKSUMS" ]; then
  printf '%s\n' "$CHECKSUMS" >> "$sums"
fi
if [ -n "$SHA256SUMS_NAME" ]; then
  say "fetching $base/$SHA256SUMS_NAME"
  fetch "$base/$SHA256SUMS_NAME" "$sums.remote" || die "cannot download $base/$SHA256SUMS_NAME"
  cat "$sums.remote" >> "$sums"
  rm -f "$sums.remote"
fi

expected_sum() {  # first matching line wins, so explicit CHECKSUMS beat SHA256SUMS
  awk -v f="$1" '{ name = $2; sub(/^\*/, "", name); sub(/^\.\//, "", name) }
    name == f && $1 ~ /^[0-9a-fA-F]+$/ && length($1) == 64 { print tolower($1); exit }' "$sums"
}

count=0
for file in $FILES; do
  count=$((count + 1))
  case $file in
    /* | *..* ) die "$file: file names must be relative and must not contain '..'" ;;
  esac
  target="$DEST/$file"
  mkdir -p "$(dirname "$target")"
  want=$(expected_sum "$file")
  if [ -z "$want" ]; then
    if [ "$REQUIRE_CHECKSUM" = 1 ]; then
      die "$file: no checksum (add it to model.download.checksums or to $SHA256SUMS_NAME)"
    fi
    say "$file: WARNING: no checksum, not verified"
  fi
  if [ -f "$target" ] && [ -f "$target.sha256" ] && [ "$(cat "$target.sha256")" = "${want:-unverified}" ]; then
    say "$file: already present and verified"
    continue
  fi
  rm -f "$target.sha256"
  if [ -f "$target" ] && [ ! -f "$target.part" ]; then mv "$target" "$target.part"; fi
  say "$file: downloading $base/$file"
  if ! fetch "$base/$file" "$target.part" resume; then
    # A server that ignores ranges or a part file that is already complete both fail here;
    # one clean retry from zero before giving up.
    say "$file: resume failed, restarting from zero"
    rm -f "$target.part"
    fetch "$base/$file" "$target.part" || die "$file: download failed from $base/$file"
  fi
  if [ -n "$want" ]; then
    say "$file: verifying sha256"
    got=$(sha256sum "$target.part" | awk '{ print $1 }')
    if [ "$got" != "$want" ]; then
      rm -f "$target.part"
      die "$file: sha256 mismatch: expected $want, got $got (partial file deleted)"
    fi
  fi
  mv "$target.part" "$target"
  printf '%s' "${want:-unverified}" > "$target.sha256"
  say "$file: ok"
done
rm -f "$sums"
[ "$count" -gt 0 ] || die "FILES is empty"
say "all $count files present and verified in $DEST"
