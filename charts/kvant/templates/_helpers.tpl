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
# Job and engine pods' state, and the JSON lines the Job steps and engine-check print. watch for the
# kopf index of the models' pods; get because the router's Role grants it (a Role grants only what
# its creator holds). patch for one annotation, each engine pod's deletion cost, written just before a
# scale-in (operator/reconcile/scale_in.py); the chart's ValidatingAdmissionPolicy (pod-writes.yaml)
# refuses any other change the operator would make to a pod.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
# Limits ConfigMaps (server-side apply) and artifact records (create). list and watch for the kopf
# index (below), and because each model's gate Role grants them on its limits ConfigMap.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch]
# Serving objects, by server-side apply (which needs create for the first apply); listed and watched
# by Kvant's label into kopf indexes, so a settled model's reads cost no request; deleted when a spec
# change stops rendering one (a router turned off), each by its uid (reconcile/serving_step.prune).
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
# spec.autoscaling's HorizontalPodAutoscaler (the HPA controller itself scales the model through its
# scale subresource, with its own ClusterRole).
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: [get, list, watch, create, patch, delete]
# The router role (smg) and each model's gate: their own ServiceAccounts, and Roles bound to them (the
# router's reads the model's pods, the gate's its limits ConfigMap).
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch, create, patch, delete]
# The namespace itself, once it is being deleted: one annotation when its last Kvant pod has gone, so
# the namespace controller's next pass does not wait out the serving pods' grace period
# (operator/namespace_nudge.py). The chart's ValidatingAdmissionPolicy (namespace-writes.yaml)
# refuses any other change the operator would make to a Namespace.
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get, patch]
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
