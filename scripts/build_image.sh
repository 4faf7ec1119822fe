#!/usr/bin/env bash
# Builds the gateway image from helm/image/Containerfile with buildah (podman or docker when buildah is
# absent), for a CI job or a developer machine:
#   scripts/build_image.sh [--tag IMAGE] [--without-nar] [--debian-base] [--ca-bundle FILE]
#                          [--output oci-archive:FILE]
#   --tag          image name (default starlight-rabbitmq:<version from pyproject.toml>)
#   --without-nar  do not build the proxy-extension NAR (extension_shim/, Maven): the image then
#                  serves the fleet mode only
#   --debian-base  build the Python base image from Debian's packages with mmdebstrap instead of
#                  pulling python:3.11-slim-bookworm (for machines that reach no image registry)
#   --ca-bundle F  CA certificates (PEM bundle) that pip trusts while building, for networks
#                  whose TLS goes through an intercepting proxy; not copied into the image
#   --output DEST  also push the image to DEST, e.g. oci-archive:/tmp/s4r.tar (buildah only)
# buildah runs with vfs storage and chroot isolation unless STORAGE_DRIVER / BUILDAH_ISOLATION
# say otherwise: that combination needs no kernel overlay support and no nested namespaces, so it
# works inside a CI container too.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml" | head -1)"
tag="starlight-rabbitmq:$version"
with_nar=1
debian_base=0
output=""
ca_bundle=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --without-nar) with_nar=0; shift ;;
    --debian-base) debian_base=1; shift ;;
    --output) output="$2"; shift 2 ;;
    --ca-bundle) ca_bundle="$2"; shift 2 ;;
    *) echo "build_image: unknown argument $1 (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
done

if command -v buildah >/dev/null; then
  builder=buildah
  export STORAGE_DRIVER="${STORAGE_DRIVER:-vfs}" BUILDAH_ISOLATION="${BUILDAH_ISOLATION:-chroot}"
elif command -v podman >/dev/null; then
  builder=podman
elif command -v docker >/dev/null; then
  builder=docker
else
  echo "build_image: no buildah, podman or docker on PATH (Debian: apt-get install buildah)" >&2
  exit 1
fi

# The build context holds only what the image needs, not the checkout's .venv or caches.
context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
# The gateway goes in as `make dist`'s wheel (the package tests/integration/test_wheel.py
# installs and runs), not as a source tree to build a second time inside the image.
make -C "$repo" --no-print-directory dist
mkdir "$context/dist" "$context/nar"
cp "$repo/dist/starlight_rabbitmq-$version-py3-none-any.whl" "$context/dist/"
if [ -n "$ca_bundle" ]; then
  cp "$ca_bundle" "$context/build-ca.pem"
else
  : >"$context/build-ca.pem"
fi
if [ "$with_nar" = 1 ]; then
  if [ ! -f "$repo/extension_shim/pom.xml" ]; then
    echo "build_image: extension_shim/pom.xml is missing, so no NAR can be built" \
      "(--without-nar builds an image for the fleet mode only)" >&2
    exit 1
  fi
  # The same settings as `make shim`: every repository Pulsar's POMs declare goes to Central.
  mvn -q -B -s "$repo/extension_shim/maven-settings.xml" -f "$repo/extension_shim/pom.xml" \
    -DskipTests package
  cp "$repo"/extension_shim/target/starlight-rabbitmq-*.nar "$context/nar/"
else
  echo "No proxy-extension NAR in this image (built with --without-nar)." >"$context/nar/README"
fi

build_args=()
if [ "$debian_base" = 1 ]; then
  [ "$builder" = buildah ] || { echo "build_image: --debian-base needs buildah" >&2; exit 1; }
  base="localhost/starlight-python-base:bookworm"
  build_args+=(--build-arg "PYTHON_IMAGE=$base")
fi
# A base built before is reused (buildah rmi it to rebuild from newer Debian packages).
if [ "$debian_base" = 1 ] && ! buildah inspect --type image "$base" >/dev/null 2>&1; then
  rootfs="$context.rootfs.tar"
  trap 'rm -rf "$context" "$rootfs"' EXIT
  # Debian's python3 with venv (ensurepip) and the tools helm/image/Containerfile runs (useradd: passwd).
  mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$rootfs"
  container="$(buildah from scratch)"
  buildah add --quiet "$container" "$rootfs" /
  buildah config --env LANG=C.UTF-8 --cmd python3 "$container"
  buildah commit --quiet --rm "$container" "$base" >/dev/null
fi

echo "build_image: building $tag with $builder"
"$builder" build "${build_args[@]}" -f "$repo/helm/image/Containerfile" -t "$tag" "$context"
if [ -n "$output" ]; then
  [ "$builder" = buildah ] || { echo "build_image: --output needs buildah" >&2; exit 1; }
  buildah push --quiet "$tag" "$output"
  echo "build_image: wrote $output"
fi
