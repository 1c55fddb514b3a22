{{/*
Value names of the Scality CSI Driver for S3 v2.2 chart (its Helm chart configuration reference,
plus image.containerRegistry, which its templates read), in one table. docs/helm.md, "Coming from
the Scality CSI Driver for S3 v2", shows it to operators. Each name is one of:
- works: s3csi has the same name with the same meaning; listed here to be read, nothing to do.
- mapped: s3csi calls it `ours`; its value is used there and NOTES.txt says to rename it. Given
  under both names with different values the rendering fails: which one was meant would be a
  guess. `default` is ours in values.yaml and counts as not given (a template cannot tell a
  default from the same value set).
- refused: the rendering fails saying why, and what to set instead when s3csi has something,
  unless the value is absent, empty ("", {}, []) or `keep` (what s3csi does anyway), or, with
  `sameAs`, equal to that s3csi value. Every refusal is listed in one error.
Scality's tls.* names are read by s3csi.s3CA.
*/}}
{{- define "s3csi.scality.table" -}}
works:
  - s3.endpointUrl
  - s3.region
  - s3CredentialSecret.{name,accessKeyId,secretAccessKey,sessionToken}
  - image.tag                          # of every image: give an s3csi version, not Scality's
  - image.pullPolicy
  - imagePullSecrets                   # names, as Scality's, or {name: ...} objects
  - node.kubeletPath
  - node.logLevel                      # 0 info, 1 debug, 4 trace
  - node.seLinuxOptions.{user,type,role,level}
  - node.nodeSelector
  - node.resources
  - node.tolerateAllTaints
  - node.defaultTolerations
  - node.tolerations
  - node.podInfoOnMountCompat.enable   # either way: the CSIDriver always has podInfoOnMount
  - mountpointPod.namespace
  - mountpointPod.priorityClassName
mapped:
  - {scality: node.s3EndpointUrl, ours: s3.endpointUrl, default: ""}
  - {scality: node.s3Region, ours: s3.region, default: us-east-1}
  - {scality: image.containerRegistry, ours: image.registry, default: ""}
  - scality: sidecars.csiProvisioner.resources
    ours: controller.provisioner.resources
    default: {requests: {cpu: 10m, memory: 40Mi}, limits: {memory: 256Mi}}
refused:
  - name: nameOverride
    why: &names object names are fixed (s3csi-<component>, CSIDriver s3.csi.scality.com); s3csi has no name override
  - name: fullnameOverride
    why: *names
  - name: image.repository
    why: s3csi runs seven images, not one; set image.registry to where they are mirrored and, if their names differ, image.repositories.<image>
  - name: node.serviceAccount.create
    keep: true
    why: s3csi always creates the node-agent's ServiceAccount s3csi-node-agent with the RBAC it needs
  - name: node.serviceAccount.name
    keep: s3csi-node-agent
    why: the node-agent's ServiceAccount is s3csi-node-agent and cannot be renamed; grant what this one was granted (an OpenShift SCC, a cloud identity) to s3csi-node-agent
  - name: controller.serviceAccount.create
    keep: true
    why: s3csi always creates the csi-controller's ServiceAccount s3csi-controller with the RBAC it needs
  - name: controller.serviceAccount.name
    keep: s3csi-controller
    why: the csi-controller's ServiceAccount is s3csi-controller and cannot be renamed; grant what this one was granted to s3csi-controller
  - {name: sidecars.nodeDriverRegistrar.image.repository, why: &registrar "s3csi has no node-driver-registrar sidecar: the node-agent registers itself with kubelet"}
  - {name: sidecars.nodeDriverRegistrar.image.tag, why: *registrar}
  - {name: sidecars.nodeDriverRegistrar.image.pullPolicy, why: *registrar}
  - {name: sidecars.nodeDriverRegistrar.resources, why: *registrar}
  - {name: sidecars.livenessProbe.image.repository, why: &probe "s3csi has no livenessprobe sidecar: kubelet probes the node-agent's own /healthz on node.adminPort"}
  - {name: sidecars.livenessProbe.image.tag, why: *probe}
  - {name: sidecars.livenessProbe.image.pullPolicy, why: *probe}
  - {name: sidecars.livenessProbe.resources, why: *probe}
  - name: sidecars.csiProvisioner.image.repository
    why: s3csi builds its own csi-provisioner image; set image.repositories.csiProvisioner (image.registry is prefixed to it)
  - name: sidecars.csiProvisioner.image.tag
    why: s3csi builds its own csi-provisioner image; set image.tags.csiProvisioner
  - name: sidecars.csiProvisioner.image.pullPolicy
    sameAs: image.pullPolicy
    why: s3csi pulls every image with image.pullPolicy; set that one
  - name: initContainer.installMountpoint.resources
    why: s3csi has no init container, nothing is installed on the nodes; the Mountpoint Pods' resources are mountpointPod.resources
  - name: mountpointPod.preemptingPriorityClassName
    why: &headroom s3csi reserves no headroom for Mountpoint Pods and creates no such PriorityClass; mountpointPod.priorityClassName is their one class
  - {name: mountpointPod.headroomPriorityClassName, why: *headroom}
  - {name: mountpointPod.headroomImage.repository, why: &pause s3csi runs no headroom pods}
  - {name: mountpointPod.headroomImage.tag, why: *pause}
  - {name: mountpointPod.headroomImage.pullPolicy, why: *pause}
  - name: cleanupCRDOnUninstall
    keep: false
    why: s3csi's uninstall never deletes attachments or Mountpoint Pods, which would cut live mounts; delete the MountpointS3PodAttachments yourself once no workload uses the driver
{{- end }}

{{/* The value at a dotted path of the values, as JSON: {"v": value}, or {} when absent. Call
with (dict "root" $ "path" "node.s3Region"). */}}
{{- define "s3csi.scality.get" -}}
{{- $cur := .root.Values -}}
{{- $found := true -}}
{{- range splitList "." .path -}}
{{- if and $found (kindIs "map" $cur) (hasKey $cur .) -}}
{{- $cur = index $cur . -}}
{{- else -}}
{{- $found = false -}}
{{- end -}}
{{- end -}}
{{- if $found }}{{ dict "v" $cur | toJson }}{{ else }}{}{{ end -}}
{{- end }}

{{/* "true" when the result of s3csi.scality.get holds a value: false counts, "", {} and [] do not. */}}
{{- define "s3csi.scality.given" -}}
{{- if hasKey . "v" -}}
{{- $v := .v -}}
{{- if and (not (kindIs "invalid" $v)) (or (kindIs "bool" $v) (not (empty $v))) }}true{{ end -}}
{{- end -}}
{{- end }}

{{/*
Applies the table to the values, as JSON: values, what s3csi uses for each mapped name of its
own, and warnings, one line per Scality name used, for NOTES.txt. Fails listing every refused
value and every name given twice with two values.
*/}}
{{- define "s3csi.scality" -}}
{{- $table := include "s3csi.scality.table" . | fromYaml -}}
{{- $values := dict -}}
{{- $warnings := list -}}
{{- $problems := list -}}
{{- range $table.mapped -}}
{{- $theirs := include "s3csi.scality.get" (dict "root" $ "path" .scality) | fromJson -}}
{{- $ours := include "s3csi.scality.get" (dict "root" $ "path" .ours) | fromJson -}}
{{- $_ := set $values .ours (get $ours "v") -}}
{{- if include "s3csi.scality.given" $theirs -}}
{{- $oursGiven := and (include "s3csi.scality.given" $ours) (ne (toJson $ours.v) (toJson .default)) -}}
{{- if and $oursGiven (ne (toJson $theirs.v) (toJson $ours.v)) -}}
{{- $problems = append $problems (printf "%s is Scality's name for %s and the two differ (%s and %s): keep only %s" .scality .ours (toJson $theirs.v) (toJson $ours.v) .ours) -}}
{{- else -}}
{{- $_ := set $values .ours $theirs.v -}}
{{- $warnings = append $warnings (printf "%s is Scality's name; s3csi uses %s, which takes its value: rename it in your values file." .scality .ours) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $table.refused -}}
{{- $got := include "s3csi.scality.get" (dict "root" $ "path" .name) | fromJson -}}
{{- if include "s3csi.scality.given" $got -}}
{{- $ok := and (hasKey . "keep") (eq (toJson $got.v) (toJson .keep)) -}}
{{- if .sameAs -}}
{{- $same := include "s3csi.scality.get" (dict "root" $ "path" .sameAs) | fromJson -}}
{{- $ok = or $ok (eq (toJson $got.v) (toJson (get $same "v"))) -}}
{{- end -}}
{{- if not $ok -}}
{{- $problems = append $problems (printf "%s: %s" .name .why) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $problems -}}
{{- fail (printf "these values use names of the Scality CSI Driver for S3 v2.2 chart that s3csi cannot take as given (docs/helm.md, \"Coming from the Scality CSI Driver for S3 v2\"):\n- %s" (join "\n- " $problems)) -}}
{{- end -}}
{{- dict "values" $values "warnings" $warnings | toJson -}}
{{- end }}

{{/* What s3csi uses for a name of its own a Scality name maps onto: a string as it is, anything
else as YAML. Call with (dict "root" $ "name" "s3.region"). */}}
{{- define "s3csi.scality.value" -}}
{{- $v := index (include "s3csi.scality" .root | fromJson).values .name -}}
{{- if kindIs "string" $v }}{{ $v }}{{ else if $v }}{{ toYaml $v }}{{ end -}}
{{- end }}
