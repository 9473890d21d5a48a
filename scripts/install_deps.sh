#!/usr/bin/env bash
# Installs the Debian packages this project needs: MPI, Python with torch/numpy/regex/matplotlib;
# then, optionally, those of the cluster on one machine (scripts/cluster.sh: Slurm, munge, iproute2):
# when they cannot be installed it says so and goes on (tests/test_cluster.sh then says "skipped").
# Idempotent (does nothing when all are present), quiet, and loud on failure.
set -euo pipefail
[ $# -eq 0 ] || { echo "error: $1: install_deps.sh takes no arguments" >&2; exit 2; }
command -v dpkg-query >/dev/null 2>&1 || { echo "error: dpkg-query: not found: this script installs Debian/Ubuntu packages; elsewhere install by hand: gcc, make, OpenMPI, Python 3 with torch, numpy, regex, matplotlib, node and npm" >&2; exit 1; }
pkgs=(build-essential openmpi-bin libopenmpi-dev python3-torch python3-numpy python3-regex python3-matplotlib libopenblas0-pthread clang-14 libclang-rt-14-dev nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# nodejs/npm may come from outside Debian (e.g. a preinstalled node): accept a working npm.
if command -v npm >/dev/null 2>&1; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<< "${missing[*]:-}"
cluster_pkgs=(slurm-wlm munge iproute2 util-linux)
cluster_missing=()
for p in "${cluster_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || cluster_missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ] && [ ${#cluster_missing[@]} -eq 0 ]; then echo "install_deps: all packages present"; exit 0; fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
[ -z "$SUDO" ] || command -v sudo >/dev/null 2>&1 || { echo "error: installing ${missing[*]} needs root, and there is no sudo: run as root, or install them by hand" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp "${TMPDIR:-/tmp}/install_deps.XXXXXX.log")   # a fresh log: an earlier one is kept
$SUDO apt-get update -qq >"$log" 2>&1 || true   # a stale index may still serve; the install says
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
    tail -n 20 "$log" | sed 's/^/  /' >&2
    echo "error: apt-get could not install ${missing[*]} (the lines above; all of it in $log)" >&2
    exit 1
  fi
fi
if [ ${#cluster_missing[@]} -gt 0 ]; then
  echo "install_deps: installing the cluster's ${cluster_missing[*]}"
  if ! $SUDO apt-get install -y -qq --no-install-recommends "${cluster_missing[@]}" >>"$log" 2>&1; then
    echo "install_deps: could not install ${cluster_missing[*]} (see $log): the cluster test will be skipped" >&2
  fi
fi
echo "install_deps: done"
