{{- define "wm.labels" -}}
app.kubernetes.io/name: workflow-manager
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* What selects one deployable's pods (Deployment, Service, PDB, spread). Called with
(list $ <deployable>). */}}
{{- define "wm.selectorLabels" -}}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* One deployable's labels: the release's and its component. (list $ <deployable>) */}}
{{- define "wm.componentLabels" -}}
{{ include "wm.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* The deployables, in a fixed order, and what sets them apart (docs/operations.md,
"Scaling each deployable"): whether one serves HTTP_PORT (a Service), whether its work is
leader-elected (no autoscaler: only the leader works), and the Leases it takes (rbac.yaml;
"*" for names made at run time). */}}
{{- define "wm.deployables" -}}
watcher: {http: false, leaderElected: true, leases: ["*"]}
apiserver: {http: true, leaderElected: false, leases: []}
compiler: {http: true, leaderElected: true, leases: [wm-compiler, wm-compiler-notify, wm-compiler-git]}
stagectl: {http: false, leaderElected: true, leases: [wm-stagectl]}
inference-auth: {http: true, leaderElected: false, leases: []}
{{- end -}}

{{/* A plain variable's value as one deployable receives it: deployables.<name>.env, then env,
then (when neither sets it) the given default. Called with (list $ <deployable> <var> <default>). */}}
{{- define "wm.plainValue" -}}
{{- $root := index . 0 -}}
{{- $d := index $root.Values.deployables (index . 1) -}}
{{- $var := index . 2 -}}
{{- $denv := $d.env | default dict -}}
{{- $env := $root.Values.env | default dict -}}
{{- if hasKey $denv $var -}}
{{ index $denv $var }}
{{- else if hasKey $env $var -}}
{{ index $env $var }}
{{- else -}}
{{ index . 3 }}
{{- end -}}
{{- end -}}

{{/* The Argo server a deployable reaches through the API server's service proxy, parsed from
ARGO_DATA_SERVER_URL exactly as shared/argo.py parse_service_url does: {scheme, service,
namespace, port, name}, name being the <scheme>:<service>:<port> the client puts in the proxy
path (the Role's resourceNames, rbac.yaml). A URL the code would refuse is refused here.
(list $ <deployable>) */}}
{{- define "wm.argoServer" -}}
{{- $url := include "wm.plainValue" (list (index . 0) (index . 1) "ARGO_DATA_SERVER_URL" "https://argo-data-server.kubeopera-argo-data.svc:2746") | trim -}}
{{- $u := urlParse $url -}}
{{- $host := $u.host -}}
{{- $port := "" -}}
{{- if regexMatch ":[^:]*$" $host -}}
{{- $port = regexFind "[^:]*$" $host -}}
{{- $host = regexReplaceAll ":[^:]*$" $host "" -}}
{{- end -}}
{{- if not (has $u.scheme (list "http" "https")) -}}
{{- fail (printf "ARGO_DATA_SERVER_URL %q: expected an http:// or https:// URL of a Service" $url) -}}
{{- end -}}
{{- if or $u.userinfo $u.query $u.fragment (not (has $u.path (list "" "/"))) -}}
{{- fail (printf "ARGO_DATA_SERVER_URL %q: a Service URL carries no credentials, query, fragment or path" $url) -}}
{{- end -}}
{{- $labels := splitList "." (lower $host) -}}
{{- if or (lt (len $labels) 2) (has "" $labels) (and (gt (len $labels) 2) (ne (index $labels 2) "svc")) -}}
{{- fail (printf "ARGO_DATA_SERVER_URL %q: expected a host <service>.<namespace>[.svc[.<domain>]]" $url) -}}
{{- end -}}
{{- if not $port -}}
{{- $port = ternary "443" "80" (eq $u.scheme "https") -}}
{{- else if not (regexMatch "^[0-9]+$" $port) -}}
{{- fail (printf "ARGO_DATA_SERVER_URL %q: the port is not a number" $url) -}}
{{- end -}}
{{- $port = toString (int $port) -}}
scheme: {{ $u.scheme }}
service: {{ index $labels 0 }}
namespace: {{ index $labels 1 }}
port: {{ $port | quote }}
name: {{ printf "%s:%s:%s" $u.scheme (index $labels 0) $port | quote }}
{{- end -}}

{{/* The tenant ClusterRoles' names: this, then compiler, executor, spark or training. The
compiler learns it as TENANT_CLUSTER_ROLE_PREFIX (deployments.yaml). */}}
{{- define "wm.tenantRolePrefix" -}}
{{ .Release.Name }}-tenant-
{{- end -}}

{{/* What each deployable reads (files/environment.yaml): readers, credentials, chart. */}}
{{- define "wm.environment" -}}
{{ .Files.Get "files/environment.yaml" }}
{{- end -}}

{{/* The variables the chart sets itself, as env entries without their name. Called with
(list $ <deployable>). */}}
{{- define "wm.chartEnv" -}}
{{- $root := index . 0 -}}
POD_NAME: {valueFrom: {fieldRef: {fieldPath: metadata.name}}}
POD_NAMESPACE: {valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
# Whom and what the compiler binds in each tenant namespace (rbac.yaml).
COMPILER_SERVICE_ACCOUNT: {value: {{ printf "%s-compiler" $root.Release.Name | quote }}}
TENANT_CLUSTER_ROLE_PREFIX: {value: {{ include "wm.tenantRolePrefix" $root | quote }}}
# Where tenants' event sources and sensors go, and their webhooks' public host.
EVENTS_NAMESPACE: {value: {{ $root.Values.events.namespace | quote }}}
{{- if $root.Values.events.publicHost }}
EVENTS_PUBLIC_HOST: {value: {{ $root.Values.events.publicHost | quote }}}
{{- end }}
# Git sync's fetches: the root filesystem is read-only (the compiler's tmpfs, deployments.yaml).
GIT_WORKDIR: {value: /var/run/wm-git}
{{- end -}}

{{/* A plain value as the string a process reads: Helm reads every number of values as a float,
so a whole one is written as an integer (33554432, not 3.3554432e+07). */}}
{{- define "wm.envValue" -}}
{{- if and (kindIs "float64" .) (eq . (float64 (int64 .))) -}}
{{ int64 . }}
{{- else -}}
{{ toString . }}
{{- end -}}
{{- end -}}

{{/* Refuses values that would give a deployable what it does not read: a credential as a
plain value, a variable the chart sets, one no deployable (or not this one) reads. */}}
{{- define "wm.checkEnvironment" -}}
{{- $table := include "wm.environment" . | fromYaml -}}
{{- if .Values.existingSecret -}}
{{- fail "existingSecret is replaced by one Secret per deployable (deployables.<name>.secret, holding only the keys it reads: docs/operations.md, \"Each deployable's Secret\")" -}}
{{- end -}}
{{- range $var, $_ := .Values.env | default dict -}}
{{- if hasKey $table.credentials $var -}}
{{- fail (printf "env.%s is a credential: it goes in the Secret of each deployable that reads it (deployables.<name>.secret), never in values" $var) -}}
{{- else if has $var $table.chart -}}
{{- fail (printf "env.%s is set by the chart from its own values (docs/configuration.md)" $var) -}}
{{- else if not (hasKey $table.readers $var) -}}
{{- fail (printf "env.%s: no deployable reads it" $var) -}}
{{- end -}}
{{- end -}}
{{- $owners := dict -}}
{{- range $name, $d := .Values.deployables -}}
{{- $secret := $d.secret | default (printf "%s-%s" $.Release.Name $name) -}}
{{- if hasKey $owners $secret -}}
{{- fail (printf "deployables.%s.secret and deployables.%s.secret are both %s: each deployable reads a Secret of its own, holding only its keys" (get $owners $secret) $name $secret) -}}
{{- end -}}
{{- $_ := set $owners $secret $name -}}
{{- range $var, $_ := $d.env | default dict -}}
{{- if hasKey $table.credentials $var -}}
{{- fail (printf "deployables.%s.env.%s is a credential: it goes in the deployable's Secret (deployables.%s.secret), never in values" $name $var $name) -}}
{{- else if has $var $table.chart -}}
{{- fail (printf "deployables.%s.env.%s is set by the chart from its own values (docs/configuration.md)" $name $var) -}}
{{- else if not (has $name (index $table.readers $var | default list)) -}}
{{- fail (printf "deployables.%s.env.%s: %s does not read it" $name $var $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A deployable's environment, exactly the variables it reads: each credential from its own
Secret (one secretKeyRef, the key named as the variable), what the chart sets, and the plain
values of env with deployables.<name>.env winning. Called with (list $ <deployable>). */}}
{{- define "wm.env" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $table := include "wm.environment" $root | fromYaml -}}
{{- $d := index $root.Values.deployables $name -}}
{{- $secret := $d.secret | default (printf "%s-%s" $root.Release.Name $name) -}}
{{- $set := include "wm.chartEnv" (list $root $name) | fromYaml -}}
{{- $plain := merge (deepCopy ($d.env | default dict)) (deepCopy ($root.Values.env | default dict)) -}}
{{- $env := list -}}
{{- range $var, $readers := $table.readers -}}
{{- if has $name $readers -}}
{{- if hasKey $table.credentials $var -}}
{{- $ref := dict "name" $secret "key" $var -}}
{{- if eq (index $table.credentials $var) "optional" -}}
{{- $_ := set $ref "optional" true -}}
{{- end -}}
{{- $env = append $env (dict "name" $var "valueFrom" (dict "secretKeyRef" $ref)) -}}
{{- else if has $var $table.chart -}}
{{- if hasKey $set $var -}}
{{- $env = append $env (merge (dict "name" $var) (index $set $var)) -}}
{{- end -}}
{{- else if hasKey $plain $var -}}
{{- $env = append $env (dict "name" $var "value" (include "wm.envValue" (index $plain $var))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $env -}}
{{- end -}}

{{/* The namespace of the Knative gateway's Service (KNATIVE_GATEWAY, <service>.<namespace>.svc...). */}}
{{- define "wm.knativeGatewayNamespace" -}}
{{- $parts := splitList "." (.Values.env.KNATIVE_GATEWAY | default "kourier-internal.kourier-system.svc.cluster.local") -}}
{{- if ge (len $parts) 2 }}{{ index $parts 1 }}{{ else }}kourier-system{{ end -}}
{{- end }}

{{/* Marks a deployable's metrics Service (services.yaml), which its ServiceMonitor selects. */}}
{{- define "wm.metricsLabel" -}}
workflow-manager.io/service: metrics
{{- end -}}

{{/* The selector of one deployable's scraped series, as its ServiceMonitor's targets carry
them: the release's namespace and the job Prometheus names after the metrics Service.
(list $ <deployable>) */}}
{{- define "wm.metricsSelector" -}}
namespace="{{ (index . 0).Release.Namespace }}", job="{{ (index . 0).Release.Name }}-{{ index . 1 }}-metrics"
{{- end -}}
