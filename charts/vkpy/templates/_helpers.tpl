{{/* The release's full name: <release>-vkpy, or the release name when it holds "vkpy". */}}
{{- define "vkpy.fullname" -}}
{{- if contains "vkpy" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-vkpy" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "vkpy.selectorLabels" -}}
app.kubernetes.io/name: vkpy
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "vkpy.labels" -}}
{{ include "vkpy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "vkpy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "vkpy.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "vkpy.nodeName" -}}
{{- default (include "vkpy.fullname" .) .Values.nodeName -}}
{{- end -}}

{{/* The leader Lease's namespace (one node): the release's, which must not be
kube-node-lease, where the nodes' heartbeat Leases are: vkpy refuses a leader Lease
there (it could be one of them: issue 27). */}}
{{- define "vkpy.leaderNamespace" -}}
{{- if eq .Release.Namespace "kube-node-lease" -}}
{{- fail "install vkpy into a namespace of its own: kube-node-lease holds the nodes' heartbeat Leases, and vkpy keeps its leader Lease in the release's namespace" -}}
{{- end -}}
{{- .Release.Namespace -}}
{{- end -}}

{{/* Whether the release serves a node set (nodeSet.count or nodeSet.groups). */}}
{{- define "vkpy.isNodeSet" -}}
{{- if and .Values.nodeSet.count .Values.nodeSet.groups -}}
{{- fail "nodeSet: give count or groups, not both" -}}
{{- end -}}
{{- if or .Values.nodeSet.count .Values.nodeSet.groups -}}true{{- end -}}
{{- end -}}

{{/* A node set's name, the value of the vkpy.io/node-set label on its Nodes and Leases:
the names' prefix (nodeName) as vkpy.fleet.node_set.node_set_name makes it. */}}
{{- define "vkpy.setName" -}}
{{- $prefix := include "vkpy.nodeName" . -}}
{{- if gt (len $prefix) 63 -}}
{{- fail "nodeSet: nodeName (the nodes' name prefix) must be at most 63 characters" -}}
{{- end -}}
{{- $prefix | replace "." "-" -}}
{{- end -}}

{{/* vkpy's image: vkpy itself, its CSR approver and its uninstall hook all run it. */}}
{{- define "vkpy.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The backend vkpy is started with: `aci` is another name for `azure`. */}}
{{- define "vkpy.provider" -}}
{{- if eq .Values.provider "aci" -}}azure{{- else -}}{{ .Values.provider }}{{- end -}}
{{- end -}}

{{/* The provider config file: providers.<provider> without credentials, plus capacity. */}}
{{- define "vkpy.providerConfig" -}}
{{- $provider := include "vkpy.provider" . -}}
{{- $config := dict -}}
{{- if eq $provider "azure" -}}
{{- $azure := .Values.providers.azure -}}
{{- $config = omit $azure "clientId" "clientSecret" "tenantId" "existingSecret" "subscriptionId" "resourceGroup" "location" -}}
{{- $_ := set $config "subscription_id" $azure.subscriptionId -}}
{{- $_ := set $config "resource_group" $azure.resourceGroup -}}
{{- $_ := set $config "region" $azure.location -}}
{{- if or $azure.clientSecret $azure.existingSecret -}}
{{- /* tenant, client and secret come from AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET */ -}}
{{- $_ := set $config "credentials" (dict "type" "client_secret") -}}
{{- end -}}
{{- else -}}
{{- $config = deepCopy (get .Values.providers $provider | default dict) -}}
{{- end -}}
{{- if .Values.capacity -}}
{{- $capacity := dict -}}
{{- range $k, $v := .Values.capacity -}}
{{- $_ := set $capacity $k (toString $v) -}}
{{- end -}}
{{- $_ := set $config "capacity" $capacity -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{- define "vkpy.credentialsSecret" -}}
{{- if .Values.providers.azure.existingSecret -}}
{{- .Values.providers.azure.existingSecret -}}
{{- else -}}
{{- printf "%s-credentials" (include "vkpy.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "vkpy.tlsSecret" -}}
{{- if eq .Values.servingCert.mode "certManager" -}}
{{- printf "%s-serving" (include "vkpy.fullname" .) -}}
{{- else -}}
{{- .Values.servingCert.secretName -}}
{{- end -}}
{{- end -}}
