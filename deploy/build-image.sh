#!/usr/bin/env bash
# build-image.sh TAG: builds the raftq image (deploy/Dockerfile) and tags it
# TAG. The binary is built here, statically, and the image has no base
# image, so nothing is pulled from a registry. Used by `make image` and by
# the compose test (test/compose), so both build the image the same way.
set -euo pipefail

tag=${1:?usage: build-image.sh TAG}
root=$(cd "$(dirname "$0")/.." && pwd)
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

# A static binary: no libc to find in an image that has none.
(cd "$root" && CGO_ENABLED=0 ${GO:-go} build -trimpath -ldflags="-s -w ${RAFTQ_LDFLAGS:-}" -o "$ctx/raftq" ./cmd/raftq)

cp -r "$root/deploy/rootfs" "$ctx/rootfs"
# TLS to anything outside the cluster needs the CA bundle; take the build
# machine's (Debian's ca-certificates).
ca=/etc/ssl/certs/ca-certificates.crt
if [ ! -s "$ca" ]; then
	echo "build-image.sh: $ca is missing: apt-get install -y ca-certificates" >&2
	exit 1
fi
mkdir -p "$ctx/rootfs/etc/ssl/certs"
cp "$ca" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
chmod 0644 "$ctx/rootfs/etc/passwd" "$ctx/rootfs/etc/group" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
# /tmp for anything that needs a scratch file (sticky, world-writable).
mkdir -p "$ctx/rootfs/tmp"
chmod 1777 "$ctx/rootfs/tmp"
mkdir -p "$ctx/data" "$ctx/etc-raftq/tls" "$ctx/etc-raftq/ca"
chmod 0750 "$ctx/data"
chmod 0700 "$ctx/etc-raftq/tls" "$ctx/etc-raftq/ca"

# The classic builder: the engine here has no BuildKit client (buildx).
# (Its deprecation notice is printed only if the build fails.)
if ! out=$(DOCKER_BUILDKIT=0 docker build --quiet --force-rm -f "$root/deploy/Dockerfile" -t "$tag" "$ctx" 2>&1); then
	echo "$out" >&2
	exit 1
fi
echo "built image $tag"
