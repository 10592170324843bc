{{/* The chart's name, or nameOverride. */}}
{{- define "tollgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: the objects' base name. */}}
{{- define "tollgate.fullname" -}}
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

{{- define "tollgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tollgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tollgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "tollgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "tollgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tollgate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* How many pods: one on SQLite, replicas on Redis. */}}
{{- define "tollgate.replicas" -}}
{{- if eq .Values.store "sqlite" -}}1{{- else -}}{{ .Values.replicas }}{{- end -}}
{{- end -}}

{{/* The probes' scheme: HTTPS when the listeners serve TLS. */}}
{{- define "tollgate.probeScheme" -}}
{{- if .Values.tls.existingSecret -}}HTTPS{{- else -}}HTTP{{- end -}}
{{- end -}}

{{/* Tollgate's settings file: the config values, the policies, and what the chart owns. */}}
{{- define "tollgate.settings" -}}
{{- $owned := list "addr" "grpc_addr" "internal_addr" "store" "sqlite_path" "redis_url" "envoy_config" "api_keys_file" "tls" -}}
{{- range $k, $_ := .Values.config -}}
{{- if has $k $owned -}}
{{- fail (printf "config.%s is set by the chart (ports, store, redis, envoyRules, apiKeys, tls values); remove it from config" $k) -}}
{{- end -}}
{{- end -}}
{{- $settings := deepCopy .Values.config -}}
{{- if .Values.policies -}}
{{- $_ := set $settings "policies" .Values.policies -}}
{{- end -}}
{{- if $settings -}}
{{- toYaml $settings -}}
{{- else -}}
{}
{{- end -}}
{{- end -}}
