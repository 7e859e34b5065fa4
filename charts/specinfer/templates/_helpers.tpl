{{/* Names, labels and the watched namespaces, in one place. */}}

{{- define "specinfer.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "specinfer.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "specinfer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specinfer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "specinfer.labels" -}}
{{ include "specinfer.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "specinfer.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "specinfer.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "specinfer.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Namespaces watched in namespaced scope, as a list (the release namespace when none are given). */}}
{{- define "specinfer.watchedNamespaces" -}}
{{- if .Values.watch.namespaces -}}
{{- toJson (uniq .Values.watch.namespaces) -}}
{{- else -}}
{{- toJson (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/* The operator configuration file (operator/pure/config.py's OperatorConfig), as YAML. */}}
{{- define "specinfer.operatorConfig" -}}
images:
  {{- toYaml .Values.runtime.images | nindent 2 }}
{{- with .Values.runtime.profiles }}
profiles:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.runtime.modelCachePersistentVolumeClaim }}
modelCache:
  persistentVolumeClaim: {{ . | quote }}
{{- end }}
prometheus:
  {{- with .Values.prometheus.url }}
  url: {{ . | quote }}
  {{- end }}
  {{- with .Values.prometheus.allowedUrls }}
  allowedUrls:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  authSecrets: {{ .Values.prometheus.authSecrets }}
{{- with .Values.runtime.allowedImages }}
allowedImages:
  {{- toYaml . | nindent 2 }}
{{- end }}
engineSecrets: {{ .Values.runtime.engineSecrets | quote }}
nudgePods: {{ .Values.rbac.nudgePods }}
{{- if or .Values.cost.accelerators .Values.cost.products }}
cost:
  currency: {{ .Values.cost.currency | quote }}
  {{- with .Values.cost.accelerators }}
  accelerators:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.cost.products }}
  products:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
tuning:
  windowSeconds: {{ .Values.tuning.windowSeconds }}
  tickSeconds: {{ .Values.tuning.tickSeconds }}
  queryTimeoutSeconds: {{ .Values.tuning.queryTimeoutSeconds }}
  labels:
    namespace: {{ .Values.tuning.labels.namespace | quote }}
    resource: {{ .Values.tuning.labels.resource | quote }}
  {{- with .Values.tuning.policy }}
  policy:
    {{- toYaml . | nindent 4 }}
  {{- end }}
rateLimit:
  qps: {{ .Values.operator.rateLimit.qps }}
  burst: {{ .Values.operator.rateLimit.burst }}
workers: {{ .Values.operator.workers }}
resyncSeconds: {{ .Values.operator.resyncSeconds }}
{{- end -}}

{{/*
RBAC rules for the objects the operator manages in a watched namespace (a Role per namespace in
namespaced scope, or the ClusterRole in cluster scope). Verbs are what the operator does, no more:
it reads SpeculativeInferences and writes only their status (server-side apply); children are
server-side applied (create + patch) and removed by the garbage collector through ownerReferences,
so there is no delete; no wildcard, no pod writes but the schedule annotation (rbac.nudgePods), no
list/watch of Secrets.
*/}}
{{- define "specinfer.namespacedRules" -}}
- apiGroups: ["specinfer.io"]
  resources: ["speculativeinferences"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["specinfer.io"]
  resources: ["speculativeinferences/status"]
  verbs: ["get", "patch"]
# Children carry ownerReferences with blockOwnerDeletion; clusters that enable the
# OwnerReferencesPermissionEnforcement admission plugin (e.g. OpenShift) require this.
- apiGroups: ["specinfer.io"]
  resources: ["speculativeinferences/finalizers"]
  verbs: ["update"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: [""]
  resources: ["services", "configmaps"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
# Engine pods, read-only: a crash-looping engine's last termination message goes into conditions;
# a calibration Job's pod hands its result over in its termination message.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"{{ if .Values.rbac.nudgePods }}, "patch"{{ end }}]
# Calibrations (docs/calibration.md): read the runs, write their status; one Job per measured engine,
# created once and deleted only when a run fails (a finished Job goes by its TTL). create: method
# auto's comparisons, which the operator creates itself (docs/selection.md); never patch or update,
# so no calibration's spec can be written once it exists.
- apiGroups: ["specinfer.io"]
  resources: ["speculativeinferencecalibrations"]
  verbs: ["get", "list", "watch", "create"]
- apiGroups: ["specinfer.io"]
  resources: ["speculativeinferencecalibrations/status"]
  verbs: ["get", "patch"]
- apiGroups: ["specinfer.io"]
  resources: ["speculativeinferencecalibrations/finalizers"]
  verbs: ["update"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "delete"]
{{- if .Values.rbac.podMonitors }}
- apiGroups: ["monitoring.coreos.com"]
  resources: ["podmonitors"]
  verbs: ["get", "list", "watch", "create", "patch"]
{{- end }}
{{- if .Values.rbac.readSecrets }}
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end }}
{{- if and .Values.peering.enabled (ne .Values.watch.scope "cluster") }}
- apiGroups: ["kopf.dev"]
  resources: ["kopfpeerings"]
  verbs: ["get", "list", "watch", "create", "patch"]
{{- end }}
{{- end -}}
