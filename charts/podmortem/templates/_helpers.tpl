{{/* Chart name, truncated to the 63 characters a DNS label allows. */}}
{{- define "podmortem.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified name: the release name, plus the chart name unless the release name contains it.
Truncated to 63 characters (DNS label); components append a suffix to a name truncated shorter.
*/}}
{{- define "podmortem.fullname" -}}
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

{{/* A component's name: fullname (cut to leave room) + "-" + component, at most 63 characters. */}}
{{- define "podmortem.componentName" -}}
{{- $root := index . 0 }}{{- $component := index . 1 }}
{{- printf "%s-%s" (include "podmortem.fullname" $root | trunc (int (sub 62 (len $component))) | trimSuffix "-") $component }}
{{- end }}

{{- define "podmortem.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "podmortem.labels" -}}
helm.sh/chart: {{ include "podmortem.chart" . }}
{{ include "podmortem.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: podmortem
{{- end }}

{{- define "podmortem.selectorLabels" -}}
app.kubernetes.io/name: {{ include "podmortem.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels and selector labels of one component: (list $ "aggregator"). */}}
{{- define "podmortem.componentLabels" -}}
{{ include "podmortem.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "podmortem.componentSelectorLabels" -}}
{{ include "podmortem.selectorLabels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "podmortem.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{- define "podmortem.aggregatorName" -}}{{ include "podmortem.componentName" (list . "aggregator") }}{{- end }}
{{- define "podmortem.webhookName" -}}{{ include "podmortem.componentName" (list . "webhook") }}{{- end }}
{{- define "podmortem.sidecarRoleName" -}}{{ include "podmortem.componentName" (list . "sidecar") }}{{- end }}

{{- define "podmortem.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "podmortem.aggregatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The webhook runs only in cluster mode: webhook configurations are cluster-scoped. */}}
{{- define "podmortem.webhookEnabled" -}}
{{- if and (eq .Values.installMode "cluster") .Values.webhook.enabled }}true{{- end }}
{{- end }}

{{/* The gRPC port's certificate and its CA (aggregator.tls). */}}
{{- define "podmortem.grpcTlsSecretName" -}}{{ include "podmortem.componentName" (list . "aggregator-grpc-tls") }}{{- end }}

{{/* The address sidecars dial: the aggregator Service, fully qualified. */}}
{{- define "podmortem.aggregatorAddress" -}}
{{- printf "%s.%s.svc:%d" (include "podmortem.aggregatorName" .) .Release.Namespace (int .Values.aggregator.grpcPort) }}
{{- end }}

{{/* Native sidecars: "auto" means on from Kubernetes 1.29, where the SidecarContainers gate is on by default. */}}
{{- define "podmortem.nativeSidecars" -}}
{{- $v := toString .Values.webhook.nativeSidecars }}
{{- if eq $v "auto" }}
{{- semverCompare ">=1.29.0-0" .Capabilities.KubeVersion.Version | toString }}
{{- else }}
{{- $v }}
{{- end }}
{{- end }}

{{/* Namespaces the aggregator watches: the release namespace in namespace mode, else watchNamespaces (empty: all). */}}
{{- define "podmortem.watchNamespaces" -}}
{{- if eq .Values.installMode "namespace" }}
{{- .Release.Namespace }}
{{- else }}
{{- join "," .Values.aggregator.watchNamespaces }}
{{- end }}
{{- end }}

{{/*
The aggregator's RBAC rules, derived from what it publishes (docs/kubernetes.md, "RBAC"): pods are
read and watched always and patched for annotations, a failed pod's log read when no sidecar sent it; job objects are read always, patched for
annotations, their status patched for the condition; Events are created for events.
*/}}
{{- define "podmortem.aggregatorRules" -}}
{{- $publish := .Values.aggregator.kube.publish }}
{{- $annotations := has "annotations" $publish }}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"{{ if $annotations }}, "patch"{{ end }}]
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
{{- if has "pod-conditions" $publish }}
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
{{- end }}
{{- if has "events" $publish }}
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end }}
{{- range list (list "kubeflow.org" "pytorchjobs") (list "batch" "jobs") (list "jobset.x-k8s.io" "jobsets") (list "trainer.kubeflow.org" "trainjobs") }}
- apiGroups: [{{ index . 0 | quote }}]
  resources: [{{ index . 1 | quote }}]
  verbs: ["get"{{ if $annotations }}, "patch"{{ end }}]
{{- if has "condition" $publish }}
- apiGroups: [{{ index . 0 | quote }}]
  resources: [{{ printf "%s/status" (index . 1) | quote }}]
  verbs: ["patch"]
{{- end }}
{{- end }}
{{- end }}

{{- define "podmortem.sidecarRules" -}}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
{{- end }}

{{/* Container security context shared by both components. */}}
{{- define "podmortem.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: {{ .Values.runAsUser }}
runAsGroup: {{ .Values.runAsUser }}
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "podmortem.webhookSecretName" -}}{{ include "podmortem.componentName" (list . "webhook-tls") }}{{- end }}

{{/* The aggregator's --auth: the value, else tokenreview in cluster mode and none in namespace mode. */}}
{{- define "podmortem.auth" -}}
{{- if .Values.aggregator.auth -}}
{{- .Values.aggregator.auth -}}
{{- else if eq .Values.installMode "namespace" -}}
none
{{- else -}}
tokenreview
{{- end -}}
{{- end }}

{{/*
The webhook's Helm-generated certificate (webhook.tls.mode "helm"), as a dict of base64 "ca", "crt" and
"key": a previous install's when there is one, so an upgrade does not rotate it, else a new CA and a
certificate it signs. The Secret and the MutatingWebhookConfiguration are two templates rendered apart,
so it is made once per render and kept in the values map they share (under "_webhookTls"): both carry
the same CA.
*/}}
{{- define "podmortem.webhookTls" -}}
{{- if not (hasKey .Values "_webhookTls") }}
{{- $name := include "podmortem.webhookName" . }}
{{- $service := printf "%s.%s.svc" $name .Release.Namespace }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "podmortem.webhookSecretName" .) }}
{{- if and $existing (index ($existing.data | default dict) "ca.crt") }}
{{- $_ := set .Values "_webhookTls" (dict "ca" (index $existing.data "ca.crt") "crt" (index $existing.data "tls.crt") "key" (index $existing.data "tls.key")) }}
{{- else }}
{{- $ca := genCA (printf "%s-ca" $name) (int .Values.webhook.tls.validityDays) }}
{{- $cert := genSignedCert $service nil (list $service (printf "%s.%s" $name .Release.Namespace) $name) (int .Values.webhook.tls.validityDays) $ca }}
{{- $_ := set .Values "_webhookTls" (dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc)) }}
{{- end }}
{{- end }}
{{- index .Values "_webhookTls" | toJson }}
{{- end }}

{{/* on when the aggregator acts on nodes: asked for, and in cluster mode (nodes need a ClusterRole). */}}
{{- define "podmortem.nodeActions" -}}
{{- if and .Values.aggregator.nodeActions.enabled (ne .Values.installMode "namespace") -}}
on
{{- else -}}
off
{{- end -}}
{{- end }}

{{/*
Namespaces the webhook never sees (a JSON list): the release's own, the control plane's (kube-system holds
its pods; kube-public and kube-node-lease hold none today, and nothing of podmortem belongs there), then
webhook.excludeNamespaces. Fixed, not a value: a label on kube-system must never inject a sidecar into the control plane.
*/}}
{{- define "podmortem.webhookExcludedNamespaces" -}}
{{- concat (list .Release.Namespace "kube-system" "kube-public" "kube-node-lease") .Values.webhook.excludeNamespaces | uniq | toJson }}
{{- end }}
