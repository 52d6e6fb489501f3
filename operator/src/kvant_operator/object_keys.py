"""Every label and annotation key the operator writes or reads, in one place on its bottom floor (it
imports nothing of the operator): renderers, reconcile steps, the protection loop and the tests
name them from here."""

from __future__ import annotations

MANAGED_BY = "kvant"
MODEL_LABEL = "kvant.dev/model"
COMPONENT_LABEL = "app.kubernetes.io/component"
SERVING_COMPONENT = "serving"  # every serving object but the limits ConfigMap (component "limits")
ROLE_LABEL = "kvant.dev/role"
KIND_LABEL = "kvant.dev/component"  # engine or router (render.roles.RoleKind)
APPLIED_HASH = "kvant.dev/applied-hash"
# On a serving Deployment, never in its pods: the runtime image its pods run and the digest of the pod
# template it was rendered as (reconcile/runtime_pin.py).
RUNTIME_IMAGE = "kvant.dev/runtime-image"
POD_TEMPLATE_DIGEST = "kvant.dev/pod-template-digest"
CONFIG_HASH = "kvant.dev/engine-config-hash"  # on serving pods: the engine's flags, so an edit rolls them
# On a QuantizedModel: "follow" takes every new runtime at once (reconcile/runtime_pin.py).
RUNTIME_POLICY = "kvant.dev/runtime"
# Kubernetes' own: which pods of a ReplicaSet a scale-in deletes first (the lower cost); the one thing
# the operator writes on a pod (reconcile/scale_in.py).
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
# The one thing the operator writes on a Namespace: when it saw the namespace's last Kvant pod go.
PODS_GONE_ANNOTATION = "kvant.dev/pods-gone-at"
SOURCE_LABEL = "kvant.dev/source"  # on fetch Jobs and source records
ARTIFACT_LABEL = "kvant.dev/artifact"  # on artifact Jobs
ATTEMPT_ANNOTATION = "kvant.dev/attempt"  # a Job's attempt, for the retry backoff
# Overrides the number of conversion workers for one model (the default follows the source size).
WORKERS_ANNOTATION = "kvant.dev/conversion-workers"
