{{/* Chart name. */}}
{{- define "stepserve.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: RELEASE-stepserve unless the release name already contains it. */}}
{{- define "stepserve.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "stepserve.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels shared by every object. */}}
{{- define "stepserve.labels" -}}
helm.sh/chart: {{ include "stepserve.chart" . }}
app.kubernetes.io/name: {{ include "stepserve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: stepserve
{{- end }}

{{/*
Selector labels of one role. Roles: "server" (today's single-pod replica; in the future pipeline
mode the leader keeps this role so the Service keeps selecting it) and, reserved, "worker".
Call with (dict "root" $ "role" "server").
*/}}
{{- define "stepserve.selectorLabels" -}}
app.kubernetes.io/name: {{ include "stepserve.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .role }}
{{- end }}

{{/* Name of an object of one role: the full name for "server", FULLNAME-ROLE otherwise. */}}
{{- define "stepserve.roleName" -}}
{{- if eq .role "server" }}
{{- include "stepserve.fullname" .root }}
{{- else }}
{{- printf "%s-%s" (include "stepserve.fullname" .root) .role | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "stepserve.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "stepserve.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Image reference: repository@digest, or repository:tag (tag defaults to appVersion[-cpu]). */}}
{{- define "stepserve.image" -}}
{{- $img := .Values.image }}
{{- if $img.digest }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else }}
{{- $tag := $img.tag | default (printf "%s%s" .Chart.AppVersion (ternary "-cpu" "" (eq $img.flavor "cpu"))) }}
{{- printf "%s:%s" $img.repository $tag }}
{{- end }}
{{- end }}

{{/* Port the probes use: the plaintext health listener when TLS is on (gRPC probes cannot
speak TLS), the gRPC port otherwise. */}}
{{- define "stepserve.probePort" -}}
{{- if .Values.tls.enabled }}{{ .Values.server.healthPort }}{{ else }}{{ .Values.server.port }}{{ end }}
{{- end }}

{{/* Seconds between SIGTERM-ready state and SIGKILL: preStop sleep + drain + slack. */}}
{{- define "stepserve.terminationGrace" -}}
{{- $l := .Values.lifecycle }}
{{- add (int64 $l.preStopSleepSeconds) (int64 .Values.server.drainTimeoutSeconds) (int64 $l.terminationGraceExtraSeconds) }}
{{- end }}

{{/* Whether the native preStop "sleep" action is used ("true" or ""). */}}
{{- define "stepserve.nativeSleep" -}}
{{- $mode := .Values.lifecycle.preStopMode }}
{{- if or (eq $mode "sleep") (and (eq $mode "auto") (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version)) }}true{{ end }}
{{- end }}

{{/* The `stepserve serve` command line (docs/serve-flags.md), one YAML list item per flag. */}}
{{- define "stepserve.args" -}}
{{- $s := .Values.server }}
{{- $m := .Values.model }}
- serve
- --model={{ printf "%s/%s" $m.mountPath $m.file }}
{{- if $m.draftFile }}
- --draft={{ printf "%s/%s" $m.mountPath $m.draftFile }}
{{- end }}
- --listen=0.0.0.0:{{ $s.port }}
- --metrics-listen=0.0.0.0:{{ $s.metricsPort }}
{{- if .Values.tls.enabled }}
- --health-listen=0.0.0.0:{{ $s.healthPort }}
- --tls-cert=/etc/stepserve/tls/tls.crt
- --tls-key=/etc/stepserve/tls/tls.key
{{- end }}
{{- if .Values.auth.enabled }}
- --auth-token-file=/etc/stepserve/auth/{{ .Values.auth.secretKey }}
{{- end }}
{{- $ints := list (list "ctx-size" $s.ctxSize) (list "kv-cache-blocks" $s.kvCacheBlocks) (list "block-size" $s.blockSize) (list "max-running" $s.maxRunning) (list "max-step-tokens" $s.maxStepTokens) (list "max-queue" $s.maxQueue) (list "top-k" $s.topK) (list "drain-timeout-s" $s.drainTimeoutSeconds) (list "watchdog-s" $s.watchdogSeconds) (list "threads" $s.threads) (list "max-draft-tokens" $s.maxDraftTokens) (list "device" $s.device) }}
{{- range $ints }}
{{- if not (kindIs "invalid" (index . 1)) }}
- --{{ index . 0 }}={{ int64 (index . 1) }}
{{- end }}
{{- end }}
{{- $floats := list (list "kv-cache-gib" $s.kvCacheGiB) (list "temperature" $s.temperature) (list "top-p" $s.topP) (list "min-p" $s.minP) (list "gpu-memory-fraction" $s.gpuMemoryFraction) }}
{{- range $floats }}
{{- if not (kindIs "invalid" (index . 1)) }}
- --{{ index . 0 }}={{ toString (index . 1) }}
{{- end }}
{{- end }}
{{- if $s.speculative }}
- --speculative={{ $s.speculative }}
{{- end }}
{{- if $s.kvDtype }}
- --kv-dtype={{ $s.kvDtype }}
{{- end }}
{{- if $s.prefixCache }}
- --prefix-cache={{ $s.prefixCache }}
{{- end }}
{{- if $s.deviceSampling }}
- --device-sampling={{ $s.deviceSampling }}
{{- end }}
{{- if $s.backend }}
- --backend={{ $s.backend }}
{{- end }}
{{- if $s.devices }}
- --devices={{ $s.devices }}
{{- end }}
{{- if $s.logFormat }}
- --log-format={{ $s.logFormat }}
{{- end }}
{{- range $s.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* Cross-field checks the schema cannot express. */}}
{{- define "stepserve.validate" -}}
{{- if .Values.pipeline.enabled }}
{{- fail "pipeline.enabled: multi-node pipeline mode is reserved and not implemented by the server yet" }}
{{- end }}
{{- if and (not (kindIs "invalid" .Values.server.kvCacheGiB)) (not (kindIs "invalid" .Values.server.kvCacheBlocks)) }}
{{- fail "server.kvCacheGiB and server.kvCacheBlocks are mutually exclusive" }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) }}
{{- fail "tls.enabled requires tls.secretName (a kubernetes.io/tls Secret)" }}
{{- end }}
{{- if and .Values.auth.enabled (not .Values.auth.secretName) }}
{{- fail "auth.enabled requires auth.secretName" }}
{{- end }}
{{- if and (eq .Values.model.source "download") (or (not .Values.model.download.baseUrl) (not .Values.model.download.files)) }}
{{- fail "model.source=download requires model.download.baseUrl and model.download.files" }}
{{- end }}
{{- if and (eq .Values.model.source "pvc") (not .Values.model.pvc.claimName) }}
{{- fail "model.source=pvc requires model.pvc.claimName" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (lt (int .Values.autoscaling.maxReplicas) (int .Values.autoscaling.minReplicas)) }}
{{- fail "autoscaling.maxReplicas must be >= autoscaling.minReplicas" }}
{{- end }}
{{- end }}
