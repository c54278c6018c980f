{{- define "wm.labels" -}}
app.kubernetes.io/name: workflow-manager
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* The tenant ClusterRoles' names: this, then compiler, executor, spark or training. The
compiler learns it as TENANT_CLUSTER_ROLE_PREFIX (deployments.yaml). */}}
{{- define "wm.tenantRolePrefix" -}}
{{ .Release.Name }}-tenant-
{{- end -}}
