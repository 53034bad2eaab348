#!/usr/bin/env bash
# Installs the Debian packages that build and check the worker image
# (scripts/build-image.sh, scripts/check-image.sh), when they are missing:
# mmdebstrap makes the root file system, umoci packs it as an OCI image,
# runc runs the image's commands, jq reads its manifest. No registry and no
# container engine are needed. Safe to run repeatedly.
set -euo pipefail

pkgs=(mmdebstrap umoci runc jq)

"$(dirname "$0")/apt-install.sh" "the worker image" "${pkgs[@]}"
