{{/* The release's full name: every object the chart creates is named after it. */}}
{{- define "kvant.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the operator's pods (never the model pods, which carry component=serving). */}}
{{- define "kvant.selectorLabels" -}}
app.kubernetes.io/name: kvant
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "kvant.labels" -}}
{{ include "kvant.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kvant.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kvant.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kvant.peeringName" -}}
{{- default (include "kvant.fullname" .) .Values.peeringName -}}
{{- end -}}

{{- define "kvant.operatorImage" -}}
{{- printf "%s:%s" .Values.image.operator.repository (default .Chart.AppVersion .Values.image.operator.tag) -}}
{{- end -}}

{{- define "kvant.runtimeImage" -}}
{{- printf "%s:%s" .Values.image.runtime.repository (default .Chart.AppVersion .Values.image.runtime.tag) -}}
{{- end -}}

{{- define "kvant.monitoringAvailable" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end -}}
{{- end -}}

{{/*
The rules for the namespaced resources the operator touches: exactly the calls in
operator/src/kvant_operator/kube.py and kopf's own. No Secrets: Jobs and pods reference a model's
credentialsSecret by name, and the kubelet, not the operator, reads it.
*/}}
{{- define "kvant.namespacedRules" -}}
# QuantizedModels: kopf lists and watches them, and patches metadata.finalizers (its daemons need
# one); the operator writes status only, never spec.
- apiGroups: [kvant.dev]
  resources: [quantizedmodels]
  verbs: [list, watch, patch]
- apiGroups: [kvant.dev]
  resources: [quantizedmodels/status]
  verbs: [patch]
# Owned objects carry blockOwnerDeletion, which OwnerReferencesPermissionEnforcement checks here.
- apiGroups: [kvant.dev]
  resources: [quantizedmodels/finalizers]
  verbs: [update]
# The plan, artifact and eval Jobs: created once by name, adopted by later models (merge patch of
# ownerReferences), and listed by artifact label to find the newest attempt. Failed attempts are
# kept as evidence, never deleted by the operator.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, create, patch]
# Job and engine pods' state, and the JSON lines the Job steps and engine-check print. get and watch
# only because the router's Role grants them (RBAC lets a Role grant only what its creator holds).
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
# Limits ConfigMaps (server-side apply) and artifact records (create).
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, create, patch]
# Serving objects, by server-side apply (which needs create for the first apply).
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, create, patch]
- apiGroups: [""]
  resources: [services]
  verbs: [get, create, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, patch]
# The router role (smg): its own ServiceAccount and a Role that reads the model's pods, bound to it.
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, create, patch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, patch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end -}}

{{/* Kopf peering: replicas list/watch the peering objects; they read (to wait for it at start)
     and patch only their own one. */}}
{{- define "kvant.peeringRules" -}}
{{- $resource := ternary "kopfpeerings" "clusterkopfpeerings" (gt (len .Values.watchNamespaces) 0) -}}
- apiGroups: [kopf.dev]
  resources: [{{ $resource }}]
  verbs: [list, watch]
- apiGroups: [kopf.dev]
  resources: [{{ $resource }}]
  resourceNames: [{{ include "kvant.peeringName" . }}]
  verbs: [get, patch]
{{- end -}}
