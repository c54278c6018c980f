{{- define "wm.labels" -}}
app.kubernetes.io/name: workflow-manager
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
