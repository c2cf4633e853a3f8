{{/* The release's resource name: <release>-sluice, or the release name when it contains the chart's. */}}
{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The Secret holding the Valkey address (and password). */}}
{{- define "sluice.valkeySecret" -}}
{{- default (printf "%s-valkey" (include "sluice.fullname" .)) .Values.valkey.existingSecret -}}
{{- end -}}

{{/* Whether sluice is given a Valkey password: "true" or "". */}}
{{- define "sluice.hasPassword" -}}
{{- if .Values.valkey.existingSecret -}}
{{- if .Values.valkey.passwordKey }}true{{ end -}}
{{- else if .Values.valkey.password -}}
{{- if not .Values.valkey.passwordKey }}{{ fail "valkey.password is set but valkey.passwordKey is empty: the password would not reach sluice" }}{{ end -}}
true
{{- end -}}
{{- end -}}

{{/* The configuration's valkey section: the settings, with password_env when there is a password. */}}
{{- define "sluice.valkeySection" -}}
{{- $v := deepCopy (default dict .Values.valkey.settings) -}}
{{- range $k := list "address" "addresses" "password_env" "password_file" "sentinel" -}}
{{- if hasKey $v $k -}}
{{- fail (printf "valkey.settings.%s: not settable here; the address and password come from the Secret (valkey.existingSecret, or valkey.address and valkey.password)" $k) -}}
{{- end -}}
{{- end -}}
{{- if include "sluice.hasPassword" . -}}
{{- $_ := set $v "password_env" "SLUICE_VALKEY_PASSWORD" -}}
{{- end -}}
{{- toYaml $v -}}
{{- end -}}

{{/* sluice.yaml: config with the valkey section. */}}
{{- define "sluice.config" -}}
{{- $c := deepCopy (default dict .Values.config) -}}
{{- range $k := list "valkey" "listen" "grpc_listen" -}}
{{- if hasKey $c $k -}}
{{- fail (printf "config.%s: set by the chart (valkey.*, service.httpPort, service.grpcPort, grpc.enabled), not in config" $k) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $c "valkey" (include "sluice.valkeySection" . | fromYaml) -}}
{{- toYaml $c -}}
{{- end -}}

{{/* Checks of values that would otherwise render a chart that misbehaves. */}}
{{- define "sluice.checks" -}}
{{- if and (not .Values.valkey.existingSecret) (not .Values.valkey.address) -}}
{{- fail "valkey: set valkey.existingSecret (a Secret with the address) or valkey.address" -}}
{{- end -}}
{{- if not .Values.valkey.addressKey -}}
{{- fail "valkey.addressKey: empty; the Secret's key holding the address is needed" -}}
{{- end -}}
{{- range $k, $_ := .Values.otel.env -}}
{{- if not (hasPrefix "OTEL_" $k) -}}
{{- fail (printf "otel.env.%s: only OTEL_* variables belong here (others: extraEnv)" $k) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.podDisruptionBudget.enabled (not .Values.autoscaling.enabled) (le (int .Values.replicaCount) (int .Values.podDisruptionBudget.minAvailable)) -}}
{{- fail (printf "podDisruptionBudget.minAvailable %d with replicaCount %d: no pod could ever be evicted and a node drain would never finish; lower it, raise replicaCount, or disable the budget" (int .Values.podDisruptionBudget.minAvailable) (int .Values.replicaCount)) -}}
{{- end -}}
{{- if and .Values.podDisruptionBudget.enabled .Values.autoscaling.enabled (le (int .Values.autoscaling.minReplicas) (int .Values.podDisruptionBudget.minAvailable)) -}}
{{- fail (printf "podDisruptionBudget.minAvailable %d with autoscaling.minReplicas %d: at the minimum no pod could be evicted" (int .Values.podDisruptionBudget.minAvailable) (int .Values.autoscaling.minReplicas)) -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled (not (dig "requests" "cpu" "" .Values.resources)) -}}
{{- fail "autoscaling.enabled: set resources.requests.cpu; the autoscaler's CPU target is a share of it and never scales without one" -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) -}}
{{- fail "autoscaling: minReplicas is above maxReplicas" -}}
{{- end -}}
{{- end -}}
