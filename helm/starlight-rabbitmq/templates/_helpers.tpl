{{/* Names and labels, as in `helm create`'s scaffold. */}}
{{- define "starlight-rabbitmq.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "starlight-rabbitmq.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "starlight-rabbitmq.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "starlight-rabbitmq.labels" -}}
helm.sh/chart: {{ include "starlight-rabbitmq.chart" . }}
{{ include "starlight-rabbitmq.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "starlight-rabbitmq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "starlight-rabbitmq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The rollup pod's: another app.kubernetes.io/name, so that no selector of the gateways
(Services, PodDisruptionBudget, Deployment, NetworkPolicy) matches it. */}}
{{- define "starlight-rabbitmq.rollupSelectorLabels" -}}
app.kubernetes.io/name: {{ include "starlight-rabbitmq.name" . }}-rollup
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: rollup
{{- end }}

{{- define "starlight-rabbitmq.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "starlight-rabbitmq.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "starlight-rabbitmq.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Whether this release runs the gateway pods itself (mode fleet). */}}
{{- define "starlight-rabbitmq.fleet" -}}
{{- if eq .Values.mode "fleet" }}true{{ end }}
{{- end }}

{{/* Host names of the Pulsar release's services, named as apache/pulsar-helm-chart names
them: "<pulsar.fullname>-<component>", where pulsar.fullname is the release's fullnameOverride,
else the release name when it contains "pulsar", else "<release>-pulsar". */}}
{{- define "starlight-rabbitmq.pulsarFullname" -}}
{{- $p := .Values.pulsar -}}
{{- if $p.fullnameOverride }}{{ $p.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains "pulsar" $p.releaseName }}{{ $p.releaseName | trunc 63 | trimSuffix "-" }}
{{- else }}{{ printf "%s-pulsar" $p.releaseName | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "starlight-rabbitmq.pulsarHost" -}}
{{- $ns := default .root.Release.Namespace .root.Values.pulsar.namespace -}}
{{- printf "%s-%s.%s.svc.%s" (include "starlight-rabbitmq.pulsarFullname" .root) .component $ns .root.Values.pulsar.clusterDomain }}
{{- end }}

{{/* Mount points of the files the chart hands to the gateway. */}}
{{- define "starlight-rabbitmq.confDir" -}}/etc/starlight-rabbitmq{{- end }}
{{- define "starlight-rabbitmq.tlsDir" -}}/etc/starlight-rabbitmq/tls{{- end }}
{{- define "starlight-rabbitmq.jwtDir" -}}/etc/starlight-rabbitmq/jwt{{- end }}
{{- define "starlight-rabbitmq.brokerCaDir" -}}/etc/starlight-rabbitmq/broker-ca{{- end }}

{{/*
Checks that values.schema.json cannot express; each failure names the value to change.
*/}}
{{- define "starlight-rabbitmq.validate" -}}
{{- $secretKeys := splitList " " (include "starlight-rabbitmq.secretKeys" .) -}}
{{- $managed := splitList " " (include "starlight-rabbitmq.chartManagedKeys" .) -}}
{{- range $key, $_ := .Values.config }}
{{- if has $key $secretKeys }}
{{- fail (printf "config.%s holds a secret: set it under secrets.values (or in secrets.existingSecret), which the chart puts in a Secret, not a ConfigMap" $key) }}
{{- end }}
{{- if eq $key "managementListener" }}
{{- fail "config.managementListener is set by the chart: use management.enabled (management.port, management.tls) instead" }}
{{- end }}
{{- if has $key $managed }}
{{- fail (printf "config.%s is set by the chart (from service.*, metrics.port, proxyProtocol.* or the pod's identity): remove it from config" $key) }}
{{- end }}
{{- if hasPrefix "rollup" $key }}
{{- fail (printf "config.%s is read by the rollup job only: set it under rollup.config (docs/helm.md, \"The rollup job\")" $key) }}
{{- end }}
{{- end }}
{{- if .Values.rollup.enabled }}
{{- if not .Values.rollup.image.repository }}
{{- fail "rollup.enabled needs rollup.image.repository: an image with the gateway's rollup extra (PySpark) and Java 17, which the gateway image lacks (docs/helm.md, \"The rollup job\")" }}
{{- end }}
{{- if and (hasKey .Values.rollup.config "rollupParquetPath") (not .Values.rollup.config.rollupParquetPath) (not .Values.rollup.postgres.existingSecret) (not (hasKey .Values.secrets.values "rollupPostgresUrl")) (not .Values.secrets.existingSecret) }}
{{- fail "rollup.config.rollupParquetPath is empty and no rollupPostgresUrl is given (rollup.postgres.existingSecret): the rollup job needs at least one output" }}
{{- end }}
{{- end }}
{{- if .Values.management.enabled }}
{{- if and .Values.management.tls (not (include "starlight-rabbitmq.fleet" .)) }}
{{- fail "management.tls applies to mode fleet only: in mode pulsarProxy the Pulsar release's proxy chooses http or https (PULSAR_PREFIX_managementListener)" }}
{{- end }}
{{- if and .Values.management.tls (not .Values.tls.enabled) }}
{{- fail "management.tls needs tls.enabled: the management API serves the AMQP listeners' certificate (tls.existingSecret)" }}
{{- end }}
{{- if include "starlight-rabbitmq.fleet" . }}
{{- $taken := dict "5672" "the AMQP port" (toString (int .Values.metrics.port)) "metrics.port" }}
{{- if .Values.tls.enabled }}
{{- $_ := set $taken "5671" "the AMQPS port" }}
{{- end }}
{{- with get $taken (toString (int .Values.management.port)) }}
{{- fail (printf "management.port %d is taken by %s in the gateway's pod: choose another" (int $.Values.management.port) .) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and (include "starlight-rabbitmq.fleet" .) .Values.tls.enabled (not .Values.tls.existingSecret) }}
{{- fail "tls.enabled needs tls.existingSecret: a kubernetes.io/tls Secret with tls.crt and tls.key" }}
{{- end }}
{{- if and (include "starlight-rabbitmq.fleet" .) (not .Values.pulsar.releaseName) }}
{{- range $key := list "brokerServiceURL" "brokerWebServiceURL" "configurationStoreServers" }}
{{- if not (get $.Values.config $key) }}
{{- fail (printf "config.%s is needed when pulsar.releaseName is empty (no Pulsar release to take it from)" $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.proxyProtocol.enabled (not .Values.proxyProtocol.trustedNetworks) }}
{{- fail "proxyProtocol.enabled needs proxyProtocol.trustedNetworks: the CIDRs of the load balancer that sends the PROXY v2 header" }}
{{- end }}
{{- if and (or .Values.jwt.secretKeyKey .Values.jwt.publicKeyKey) (not .Values.jwt.existingSecret) }}
{{- fail "jwt.secretKeyKey / jwt.publicKeyKey need jwt.existingSecret: the Secret that holds the key" }}
{{- end }}
{{- if and (include "starlight-rabbitmq.fleet" .) (hasKey .Values.config "authenticationEnabled") (not .Values.config.authenticationEnabled) (not .Values.config.amqpAllowUnauthenticatedRemote) }}
{{- fail "config.authenticationEnabled=false lets anyone in with any credentials on the chart's listeners (0.0.0.0), which the gateway refuses: set config.amqpAllowUnauthenticatedRemote=true too to run it open on purpose, or keep authentication on (jwt.*; docs/helm.md, \"Authentication\")" }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable)) }}
{{- fail "podDisruptionBudget: set either minAvailable or maxUnavailable (null the other)" }}
{{- end }}
{{- end }}

{{/* A value as gateway.conf writes it: numbers without an exponent, booleans as true/false. */}}
{{- define "starlight-rabbitmq.confValue" -}}
{{- if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- end }}

{{/* The gateway.conf keys derived from other values. */}}
{{- define "starlight-rabbitmq.derivedConfig" -}}
{{- $conf := dict -}}
{{- $listeners := list "amqp://0.0.0.0:5672" -}}
{{- if .Values.tls.enabled }}
{{- $listeners = append $listeners "amqps://0.0.0.0:5671" -}}
{{- $_ := set $conf "tlsCertificateFilePath" (printf "%s/tls.crt" (include "starlight-rabbitmq.tlsDir" .)) -}}
{{- $_ := set $conf "tlsKeyFilePath" (printf "%s/tls.key" (include "starlight-rabbitmq.tlsDir" .)) -}}
{{- if .Values.tls.caKey }}
{{- $_ := set $conf "tlsTrustCertsFilePath" (printf "%s/%s" (include "starlight-rabbitmq.tlsDir" .) .Values.tls.caKey) -}}
{{- end }}
{{- end }}
{{- $_ := set $conf "amqpListeners" (join "," $listeners) -}}
{{- /* Listening on every interface: authenticated unless config says otherwise (the reference's
default, off, lets any credentials in, which the gateway allows on loopback only). Set only when
config has no say: sprig's merge would replace config's false by this true (false counts as
unset there). */ -}}
{{- if not (hasKey .Values.config "authenticationEnabled") }}
{{- $_ := set $conf "authenticationEnabled" true -}}
{{- end }}
{{- $_ := set $conf "metricsListener" (printf "http://0.0.0.0:%d" (int .Values.metrics.port)) -}}
{{- if .Values.management.enabled }}
{{- $_ := set $conf "managementListener" (printf "%s://0.0.0.0:%d" (ternary "https" "http" .Values.management.tls) (int .Values.management.port)) -}}
{{- end }}
{{- $_ := set $conf "amqpClusterName" (include "starlight-rabbitmq.fullname" .) -}}
{{- if .Values.proxyProtocol.enabled }}
{{- $_ := set $conf "amqpProxyProtocolTrustedNetworks" (join "," .Values.proxyProtocol.trustedNetworks) -}}
{{- end }}
{{- if .Values.pulsar.releaseName }}
{{- $_ := set $conf "brokerServiceURL" (printf "pulsar://%s:6650" (include "starlight-rabbitmq.pulsarHost" (dict "root" . "component" "broker"))) -}}
{{- $_ := set $conf "brokerWebServiceURL" (printf "http://%s:8080" (include "starlight-rabbitmq.pulsarHost" (dict "root" . "component" "broker"))) -}}
{{- $_ := set $conf "configurationStoreServers" (printf "%s:2181" (include "starlight-rabbitmq.pulsarHost" (dict "root" . "component" "zookeeper"))) -}}
{{- end }}
{{- if .Values.jwt.secretKeyKey }}
{{- $_ := set $conf "tokenSecretKey" (printf "file://%s/%s" (include "starlight-rabbitmq.jwtDir" .) .Values.jwt.secretKeyKey) -}}
{{- end }}
{{- if .Values.jwt.publicKeyKey }}
{{- $_ := set $conf "tokenPublicKey" (printf "file://%s/%s" (include "starlight-rabbitmq.jwtDir" .) .Values.jwt.publicKeyKey) -}}
{{- end }}
{{- if .Values.brokerTls.existingSecret }}
{{- $_ := set $conf "brokerClientTrustCertsFilePath" (printf "%s/%s" (include "starlight-rabbitmq.brokerCaDir" .) .Values.brokerTls.caKey) -}}
{{- end }}
{{- toYaml $conf }}
{{- end }}

{{/* gateway.conf: the derived keys, then `config` (which wins), sorted by key. */}}
{{- define "starlight-rabbitmq.gatewayConf" -}}
# Rendered by the starlight-rabbitmq Helm chart from its values; docs/configuration.md.
{{- $conf := merge (deepCopy .Values.config) (include "starlight-rabbitmq.derivedConfig" . | fromYaml) }}
{{- range $key := keys $conf | sortAlpha }}
{{ $key }}={{ include "starlight-rabbitmq.confValue" (get $conf $key) }}
{{- end }}
{{- end }}

{{/* The rollup job's volume: its checkpoint and, by default, its Parquet output. */}}
{{- define "starlight-rabbitmq.rollupDataDir" -}}/var/lib/starlight-rollup{{- end }}

{{/* rollup.conf: the gateways' gateway.conf (the same Pulsar address, credentials and
usage-events topic) without their listeners, plus the rollup* keys: the checkpoint and Parquet
directories on the volume, then rollup.config (which wins, an empty value included). Set key
by key: sprig's merge would take an empty rollupParquetPath for unset. */}}
{{- define "starlight-rabbitmq.rollupConf" -}}
# Rendered by the starlight-rabbitmq Helm chart for the rollup job; docs/rollup.md.
{{- $conf := include "starlight-rabbitmq.derivedConfig" . | fromYaml }}
{{- range $key, $value := .Values.config }}
{{- $_ := set $conf $key $value }}
{{- end }}
{{- range $key := list "amqpListeners" "metricsListener" "managementListener" }}
{{- $_ := unset $conf $key }}
{{- end }}
{{- $dir := include "starlight-rabbitmq.rollupDataDir" . }}
{{- $_ := set $conf "rollupCheckpointLocation" (printf "%s/checkpoint" $dir) }}
{{- $_ := set $conf "rollupParquetPath" (printf "%s/parquet" $dir) }}
{{- range $key, $value := .Values.rollup.config }}
{{- $_ := set $conf $key $value }}
{{- end }}
{{- range $key := keys $conf | sortAlpha }}
{{ $key }}={{ include "starlight-rabbitmq.confValue" (get $conf $key) }}
{{- end }}
{{- end }}

{{- define "starlight-rabbitmq.rollupImage" -}}
{{- printf "%s:%s" .Values.rollup.image.repository (default .Chart.AppVersion .Values.rollup.image.tag) }}
{{- end }}

{{/* Seconds the gateway may take to stop: preStop + closing clients + margin. */}}
{{- define "starlight-rabbitmq.terminationGracePeriod" -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- $closeMs := 2000 }}
{{- if hasKey .Values.config "amqpConnectionCloseTimeout" }}
{{- $closeMs = int .Values.config.amqpConnectionCloseTimeout }}
{{- end }}
{{- add .Values.lifecycle.preStopSleepSeconds (div (add $closeMs 999) 1000) .Values.lifecycle.shutdownMarginSeconds }}
{{- else }}
{{- .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}
