#!/usr/bin/env bash
# The pure-Python wheels slabscope serve and load need on a machine without aiohttp (the GPU image): aiohttp and its
# dependencies, as py3-none-any wheels, into .whl/ at the repository root (git-ignored). Run it here, on a machine
# with pip and a package index; the lead carries .whl/ to the GPU machine (run(carry=[".whl"])).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$root/.whl"
"${PIP:-$root/.venv/bin/pip}" download --no-deps --only-binary=:all: --platform any --python-version 3.12 \
  --implementation py -d "$root/.whl" \
  "aiohttp==3.14.5" "multidict==7.2.1" "yarl==1.25.1" "frozenlist==1.8.0" "propcache==0.5.4" "aiosignal==1.4.0" \
  "aiohappyeyeballs==2.7.1" "attrs==26.1.0" "idna==3.20" "typing_extensions==4.16.0"
ls -la "$root/.whl"
