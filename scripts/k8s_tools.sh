#!/usr/bin/env bash
# Builds the Kubernetes tools the chart tests run for real, from the Go module proxy, into a cache
# outside the repository (default ~/.cache/starlight-tools, override STARLIGHT_TOOLS_DIR):
#   bin/helm                      helm v3.22.0
#   helm-plugins/unittest/        the helm-unittest v1.1.2 plugin (binary + plugin.yaml)
#   bin/kube-apiserver            Kubernetes v1.37.2
#   bin/etcd                      etcd v3.6.7
# A tool already in the cache is not rebuilt, so a warm machine runs this in well under a second
# and needs no network. There is no Debian package for helm, and no registry here serves a
# Kubernetes binary, so everything is compiled from the modules' source (the first run takes
# ~10-15 minutes on 2 cores, nearly all of it kube-apiserver).
# Usage: scripts/k8s_tools.sh [--print-dir]
set -euo pipefail

HELM_VERSION=v3.22.0
# The Kubernetes version helm assumes without a cluster (`helm template`, `helm lint`): that of
# its client-go (v0.37), as helm's own Makefile sets it; a plain `go install` leaves 1.20.
HELM_KUBE_MINOR=37
UNITTEST_VERSION=v1.1.2
KUBERNETES_VERSION=v1.37.2
# Kubernetes' staging modules (k8s.io/api, client-go, ...) are published as v0.<minor>.<patch>.
KUBERNETES_STAGING_VERSION=v0.37.2
ETCD_VERSION=v3.6.7

tools_dir="${STARLIGHT_TOOLS_DIR:-$HOME/.cache/starlight-tools}"
if [ "${1:-}" = "--print-dir" ]; then
  echo "$tools_dir"
  exit 0
fi
mkdir -p "$tools_dir/bin" "$tools_dir/src" "$tools_dir/logs"
# Two test sessions (or a developer and CI) starting at once must not build into the same tree.
exec 9>"$tools_dir/.lock"
flock 9

export GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local

# The module cache's copy is read-only and lacks the nested modules of a multi-module repository;
# build from a writable copy whose go.mod we may edit.
writable_copy() {  # module@version destination
  local dir
  dir=$(go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  rm -rf "$2"
  cp -r "$dir" "$2"
  chmod -R u+w "$2"
  rm -rf "$2/vendor" "$2/go.work" "$2/go.work.sum"
}

# Marks a finished tool with the version it was built from, so a version bump rebuilds it.
built() { [ -x "$1" ] && [ "$(cat "$1.version" 2>/dev/null)" = "$2" ]; }
stamp() { echo "$2" >"$1.version"; }

build_helm() {
  local target="$tools_dir/bin/helm"
  local recipe="$HELM_VERSION kube 1.$HELM_KUBE_MINOR"
  built "$target" "$recipe" && return
  echo "k8s_tools: building helm $HELM_VERSION"
  local kube="-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1"
  kube+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$HELM_KUBE_MINOR"
  kube+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1"
  kube+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$HELM_KUBE_MINOR"
  GOBIN="$tools_dir/bin" go install \
    -ldflags "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION $kube" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  stamp "$target" "$recipe"
}

build_unittest() {
  # helm-unittest's go.mod has replace directives, which `go install pkg@version` refuses.
  local plugin="$tools_dir/helm-plugins/unittest"
  built "$plugin/untt" "$UNITTEST_VERSION" && return
  echo "k8s_tools: building helm-unittest $UNITTEST_VERSION"
  local src="$tools_dir/src/helm-unittest"
  writable_copy "github.com/helm-unittest/helm-unittest@$UNITTEST_VERSION" "$src"
  mkdir -p "$plugin"
  (cd "$src" && go build -o "$plugin/untt" ./cmd/helm-unittest)
  cat >"$plugin/plugin.yaml" <<PLUGIN
name: "unittest"
version: "${UNITTEST_VERSION#v}"
usage: "unit test for helm charts"
description: "helm-unittest built from source by scripts/k8s_tools.sh"
ignoreFlags: false
command: "\$HELM_PLUGIN_DIR/untt"
PLUGIN
  stamp "$plugin/untt" "$UNITTEST_VERSION"
  rm -rf "$src"
}

build_etcd() {
  local target="$tools_dir/bin/etcd"
  built "$target" "$ETCD_VERSION" && return
  echo "k8s_tools: building etcd $ETCD_VERSION"
  local src="$tools_dir/src/etcd-server"
  writable_copy "go.etcd.io/etcd/server/v3@$ETCD_VERSION" "$src"
  # The server module's replaces point at sibling directories of etcd's repository, which a
  # module download does not contain: use the published modules of the same release instead.
  (cd "$src" && python3 - "$ETCD_VERSION" <<'PY'
import re, sys
version = sys.argv[1]
text = open("go.mod").read()
text = re.sub(r"^\s*(go\.etcd\.io/etcd/\S+)\s*=>\s*\.\./\S+\s*$", rf"\1 => \1 {version}", text, flags=re.M)
text = re.sub(r"^replace\s+(go\.etcd\.io/etcd/\S+)\s*=>\s*\.\./\S+\s*$", rf"replace \1 => \1 {version}", text, flags=re.M)
open("go.mod", "w").write(text)
PY
  go build -o "$target" .)
  stamp "$target" "$ETCD_VERSION"
  rm -rf "$src"
}

build_kube_apiserver() {
  local target="$tools_dir/bin/kube-apiserver"
  built "$target" "$KUBERNETES_VERSION" && return
  echo "k8s_tools: building kube-apiserver $KUBERNETES_VERSION (about 10 minutes on 2 cores)"
  local src="$tools_dir/src/kubernetes"
  writable_copy "k8s.io/kubernetes@$KUBERNETES_VERSION" "$src"
  # Kubernetes replaces every k8s.io/<staging> module with ./staging/src/k8s.io/<staging>, a
  # directory the module download leaves out; the same code is published as v0.<minor>.<patch>.
  (cd "$src" && python3 - "$KUBERNETES_STAGING_VERSION" <<'PY'
import re, sys
version = sys.argv[1]
text = open("go.mod").read()
text = re.sub(r"(k8s\.io/[\w.-]+)\s*=>\s*\./staging/src/\S+", rf"\1 => \1 {version}", text)
open("go.mod", "w").write(text)
PY
  # gitVersion lets helm parse the server's version (it refuses "v0.0.0-master").
  go build -o "$target" \
    -ldflags "-X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37" \
    ./cmd/kube-apiserver)
  stamp "$target" "$KUBERNETES_VERSION"
  rm -rf "$src"
}

timed() {  # step: runs it, and says how long it took when it built something
  local start=$SECONDS
  "$1"
  if [ $((SECONDS - start)) -gt 1 ]; then
    echo "k8s_tools: ${1#build_} took $((SECONDS - start)) s"
  fi
}

timed build_helm
timed build_unittest
timed build_etcd
timed build_kube_apiserver
