#!/usr/bin/env bash
# Installs the Debian packages this project needs: MPI, Python with torch/numpy/regex/matplotlib.
# Idempotent (does nothing when all are present), quiet, and loud on failure.
set -euo pipefail
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
if [ ${#missing[@]} -eq 0 ]; then echo "install_deps: all packages present"; exit 0; fi
echo "install_deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get update -qq >/tmp/install_deps.log 2>&1 || \
   ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >>/tmp/install_deps.log 2>&1; then
  echo "install_deps: FAILED installing ${missing[*]}; last lines of /tmp/install_deps.log:" >&2
  tail -n 20 /tmp/install_deps.log >&2
  exit 1
fi
echo "install_deps: done"
