{{/* Role and RoleBinding for a leader-elected service: call with (dict "root" $ "name" "s3csi-janitor" "component" "janitor"); .name is the ServiceAccount. */}}
{{- define "s3csi.leaderElectionRBAC" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .name }}-leader-election
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "s3csi.componentLabels" . | nindent 4 }}
rules:
  # --leader-elect: controller-runtime's Lease lock Gets, Creates and Updates the Lease in the
  # pod's namespace.
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["get", "create", "update"]
  # The manager records the leadership change as an Event on the Lease (Create, then Patch).
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["create", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .name }}-leader-election
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "s3csi.componentLabels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .name }}-leader-election
subjects:
  - kind: ServiceAccount
    name: {{ .name }}
    namespace: {{ .root.Release.Namespace }}
{{- end }}

{{/* A PodDisruptionBudget keeping one replica of a multi-replica service through drains. */}}
{{- define "s3csi.pdb" -}}
{{- if gt (int .replicas) 1 }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "s3csi.componentLabels" . | nindent 4 }}
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      {{- include "s3csi.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end }}
