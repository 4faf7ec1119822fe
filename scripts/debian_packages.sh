#!/usr/bin/env bash
# Installs the Debian packages the test suite runs for real (Prometheus, HAProxy, PostgreSQL,
# jemalloc, the gateway's memory allocator where the system has it, and rabbitmq-server for
# its /usr/bin/rabbitmqadmin, which the management API's tests drive), only those missing:
# a machine that has them all runs nothing and needs no network.
# Usage: scripts/debian_packages.sh [PACKAGE ...]   (default: the suite's list below)
set -euo pipefail
packages=("$@")
if [ ${#packages[@]} -eq 0 ]; then
  packages=(prometheus haproxy postgresql libjemalloc2 rabbitmq-server)
fi
missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  sudo=sudo
else
  sudo=
fi
echo "debian_packages: installing ${missing[*]}"
$sudo apt-get update -q >/dev/null
# The packages' own services are not wanted: the tests start their servers on loopback
# themselves. policy-rc.d's exit 101 tells invoke-rc.d not to start anything.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod +x "$policy"
  trap '$sudo rm -f "$policy"' EXIT
fi
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
