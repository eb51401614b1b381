#!/bin/sh
# deploy/images/build.sh CACHE_DIR: the images docker-compose.yml and deploy/Dockerfile name, made from what a machine
# without Docker Hub reaches: Debian bookworm root file systems made by mmdebstrap (through the host's apt set-up)
# and imported, with every package an image needs included then (apt cannot run inside the containers: they have no
# way out); binaries built from their Go modules; Debian's Prometheus; npm from the npm registry. Each is tagged with
# the name the compose file uses, so that the same file runs. docs/deploy.md ("On an engine without Docker Hub").
#
# An image is made when its tag is missing, or is one this script made from other inputs (label io.sleipnir.inputs);
# a tag it did not make (pulled from a registry) is left alone. Root file systems and downloads are kept in CACHE_DIR.
# Environment: NATS_SERVER and JAEGER, the binaries (make nats-server, make jaeger); GO (go); docker's own
# (DOCKER_HOST). Runs as root (mmdebstrap's root mode).
set -eu
[ $# = 1 ] || { echo "usage: $0 CACHE_DIR (env NATS_SERVER, JAEGER: the binaries)" >&2; exit 2; }
cache=$(mkdir -p "$1" && cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
GO=${GO:-go}
: "${NATS_SERVER:?the nats-server binary (make nats-server)}" "${JAEGER:?the jaeger binary (make jaeger)}"
for tool in mmdebstrap docker npm apt-get dpkg-deb sha256sum; do
	command -v $tool >/dev/null || { echo "build.sh needs $tool" >&2; exit 1; }
done

# The tags, as docker-compose.yml and deploy/Dockerfile spell them (deploy/compose_test.go checks that they agree).
DEBIAN=debian:bookworm-slim
GOLANG=golang:1.26-bookworm
NATS=nats:2.15.2-alpine
PROMETHEUS=prom/prometheus:v3.5.0
JAEGER_IMAGE=jaegertracing/all-in-one:1.76.0
NODE=node:22-bookworm-slim
NPM=npm@9.9.4

# Packages per root file system. runtime: the base of every image (wget for the compose file's health checks).
RUNTIME_PACKAGES=wget
# build: what the golang image and deploy/Dockerfile's build stage need (cgo, Clp and the static archives it links).
BUILD_PACKAGES=gcc,g++,libc6-dev,make,pkg-config,coinor-libclp-dev,libgfortran-12-dev
NODE_PACKAGES=nodejs,ca-certificates,wget
# Slim as Debian's own slim images: no manual pages, documentation (copyrights kept) or translations.
SLIM="--dpkgopt=path-exclude=/usr/share/man/* --dpkgopt=path-exclude=/usr/share/doc/* --dpkgopt=path-include=/usr/share/doc/*/copyright --dpkgopt=path-exclude=/usr/share/locale/*"

key() { printf '%s\n' "$@" | sha256sum | cut -c1-16; }
filekey() { sha256sum "$1" | cut -c1-16; }

# made TAG INPUTS: whether TAG is already what INPUTS make (or is not ours to replace).
made() {
	have=$(docker image inspect -f '{{index .Config.Labels "io.sleipnir.inputs"}}' "$1" 2>/dev/null) || return 1
	case "$have" in
	"$2") echo "$1: up to date"; return 0 ;;
	"" | "<no value>") echo "$1: not made here (from a registry?): kept"; return 0 ;;
	esac
	return 1
}

# rootfs NAME PACKAGES: the path of a cached bookworm root file system (minbase and PACKAGES) as a tar.
rootfs() {
	tar="$cache/rootfs/$1-$(key "$2" "$SLIM").tar"
	if [ ! -f "$tar" ]; then
		mkdir -p "$cache/rootfs"
		echo "mmdebstrap $1: $2" >&2
		# shellcheck disable=SC2086 # SLIM is one option a word
		mmdebstrap --quiet --format=tar --variant=minbase --include="$2" $SLIM bookworm "$tar.tmp" >&2
		mv "$tar.tmp" "$tar"
	fi
	echo "$tar"
}

# import TAR TAG INPUTS: TAR as the image TAG.
import() {
	made "$2" "$3" && return 0
	docker import --change "LABEL io.sleipnir.inputs=$3" --change 'CMD ["bash"]' "$1" "$2" >/dev/null
	echo "$2: imported $(basename "$1")"
}

# build TAG INPUTS DOCKERFILE CONTEXT [ARG=VALUE ...]: docker build of DOCKERFILE in CONTEXT (removed after) as TAG.
build() {
	tag=$1 inputs=$2 file=$3 ctx=$4
	shift 4
	if ! made "$tag" "$inputs"; then
		args=""
		for a in "$@"; do args="$args --build-arg $a"; done
		# shellcheck disable=SC2086 # one word per argument
		docker build --quiet --label "io.sleipnir.inputs=$inputs" -t "$tag" -f "$file" $args "$ctx" >/dev/null
		echo "$tag: built"
	fi
	rm -rf "$ctx"
}

context() { mktemp -d "$cache/context.XXXXXX"; }

runtime=$(rootfs runtime "$RUNTIME_PACKAGES")
runtime_key=$(key "$runtime")
import "$runtime" "$DEBIAN" "$runtime_key"

# golang: the build root file system, the host's Go tool chain (the 1.26 the tag names) and go.mod's modules, taken
# from the host's module cache when there (as a file proxy) and from the Go module proxy otherwise.
goversion=$($GO env GOVERSION)
case "$goversion" in go1.26*) ;; *) echo "$GOLANG needs Go 1.26; $GO is $goversion" >&2; exit 1 ;; esac
buildfs=$(rootfs build "$BUILD_PACKAGES")
base=sleipnir-images/bookworm-build:$(key "$buildfs")
import "$buildfs" "$base" "$(key "$buildfs")"
golang_key=$(key "$buildfs" "$goversion" "$(filekey "$repo/go.sum")")
if ! made "$GOLANG" "$golang_key"; then
	ctx=$(context)
	cp -a "$($GO env GOROOT)" "$ctx/go"
	hostmod=$($GO env GOMODCACHE)
	(cd "$repo" && GOMODCACHE="$ctx/mod" GOFLAGS=-mod=mod GOPROXY="file://$hostmod/cache/download,$($GO env GOPROXY)" $GO mod download)
	build "$GOLANG" "$golang_key" "$here/golang.Dockerfile" "$ctx" "BASE=$base"
fi

ctx=$(context)
cp "$NATS_SERVER" "$ctx/nats-server"
build "$NATS" "$(key "$runtime_key" "$(filekey "$NATS_SERVER")")" "$here/nats.Dockerfile" "$ctx"

ctx=$(context)
cp "$JAEGER" "$ctx/jaeger"
build "$JAEGER_IMAGE" "$(key "$runtime_key" "$(filekey "$JAEGER")")" "$here/jaeger.Dockerfile" "$ctx"

# Prometheus: the binary of Debian's package, as apt-get downloads it.
mkdir -p "$cache/debs"
deb=$(ls "$cache"/debs/prometheus_*.deb 2>/dev/null | tail -1 || true)
if [ -z "$deb" ]; then
	(cd "$cache/debs" && apt-get download -q prometheus >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get download -q prometheus >/dev/null; })
	deb=$(ls "$cache"/debs/prometheus_*.deb | tail -1)
fi
ctx=$(context)
dpkg-deb -x "$deb" "$ctx/deb"
mv "$ctx/deb/usr/bin/prometheus" "$ctx/prometheus"
rm -rf "$ctx/deb"
build "$PROMETHEUS" "$(key "$runtime_key" "$(basename "$deb")")" "$here/prometheus.Dockerfile" "$ctx"

# node: Debian's Node.js, npm's own package (npm pack: no install scripts run).
nodefs=$(rootfs node "$NODE_PACKAGES")
nodebase=sleipnir-images/bookworm-node:$(key "$nodefs")
import "$nodefs" "$nodebase" "$(key "$nodefs")"
tgz="$cache/npm-${NPM#npm@}.tgz"
[ -f "$tgz" ] || (cd "$cache" && npm pack --silent "$NPM" >/dev/null)
ctx=$(context)
(cd "$ctx" && tar xzf "$tgz" && mv package npm)
build "$NODE" "$(key "$nodefs" "$NPM")" "$here/node.Dockerfile" "$ctx" "BASE=$nodebase"
