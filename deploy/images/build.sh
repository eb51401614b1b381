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
BUILD_PACKAGES=gcc,g++,libc6-dev,make,pkg-config,coinor-libclp-dev,libgfortran-12-dev,zlib1g-dev
NODE_PACKAGES=nodejs,ca-certificates,wget
# Slim as Debian's own slim images: no manual pages, documentation (copyrights kept) or translations.
SLIM="--dpkgopt=path-exclude=/usr/share/man/* --dpkgopt=path-exclude=/usr/share/doc/* --dpkgopt=path-include=/usr/share/doc/*/copyright --dpkgopt=path-exclude=/usr/share/locale/*"

key() { printf '%s\n' "$@" | sha256sum | cut -c1-16; }
filekey() { sha256sum "$1" | cut -c1-16; }
t0=$(date +%s)
say() { echo "$* ($(($(date +%s) - t0)) s)"; }

# made TAG INPUTS: whether TAG is already what INPUTS make (or is not ours to replace).
made() {
	have=$(docker image inspect -f '{{index .Config.Labels "io.sleipnir.inputs"}}' "$1" 2>/dev/null) || return 1
	case "$have" in
	"$2") echo "$1: up to date"; return 0 ;;
	"" | "<no value>") echo "$1: not made here (from a registry?): kept"; return 0 ;;
	esac
	return 1
}

# The root file systems: NAME PACKAGES, cached as $cache/rootfs/NAME-KEY.tar. mmdebstrap mostly waits on downloads:
# those needed are made side by side (rootfs_start), then waited for (rootfs_wait).
fskey() { key bookworm "$1" "$SLIM"; }
fspath() { echo "$cache/rootfs/$1-$(fskey "$2").tar"; }
pending=""
rootfs_start() {
	tar=$(fspath "$1" "$2")
	[ -f "$tar" ] && return 0
	mkdir -p "$cache/rootfs"
	say "mmdebstrap $1: minbase and $2"
	# shellcheck disable=SC2086 # SLIM is one option a word
	{ mmdebstrap --quiet --format=tar --variant=minbase --include="$2" $SLIM bookworm "$tar.tmp" >"$tar.log" 2>&1 &&
		mv "$tar.tmp" "$tar"; } &
	pending="$pending $!:$tar"
}
rootfs_wait() {
	for job in $pending; do
		wait "${job%%:*}" || { echo "mmdebstrap failed: ${job#*:}.log" >&2; cat "${job#*:}.log" >&2; exit 1; }
		say "mmdebstrap: $(basename "${job#*:}")"
	done
	pending=""
}

# import TAR TAG INPUTS: TAR as the image TAG.
import() {
	docker import --change "LABEL io.sleipnir.inputs=$3" --change 'CMD ["bash"]' "$1" "$2" >/dev/null
	say "$2: imported $(basename "$1")"
}

# build TAG INPUTS DOCKERFILE CONTEXT [ARG=VALUE ...]: docker build of DOCKERFILE in CONTEXT (removed after) as TAG.
build() {
	tag=$1 inputs=$2 file=$3 ctx=$4
	shift 4
	args=""
	for a in "$@"; do args="$args --build-arg $a"; done
	# shellcheck disable=SC2086 # one word per argument
	docker build --quiet --label "io.sleipnir.inputs=$inputs" -t "$tag" -f "$file" $args "$ctx" >/dev/null
	rm -rf "$ctx"
	say "$tag: built"
}

context() { mktemp -d "$cache/context.XXXXXX"; }
trap 'rm -rf "$cache"/context.* "$cache"/rootfs/*.tmp' EXIT

goversion=$($GO env GOVERSION)
case "$goversion" in go1.26*) ;; *) echo "$GOLANG needs Go 1.26; $GO is $goversion" >&2; exit 1 ;; esac
runtime_key=$(fskey "$RUNTIME_PACKAGES")
build_key=$(fskey "$BUILD_PACKAGES")
node_key=$(fskey "$NODE_PACKAGES")
NODE_BASE=sleipnir-images/bookworm-node:$node_key
golang_key=$(key "$build_key" "$goversion" "$(filekey "$repo/go.sum")" "$(filekey "$0")")
node_image_key=$(key "$node_key" "$NPM" "$(filekey "$here/node.Dockerfile")")

made "$DEBIAN" "$runtime_key" && have_debian=1 || { have_debian=0; rootfs_start runtime "$RUNTIME_PACKAGES"; }
made "$GOLANG" "$golang_key" && have_golang=1 || { have_golang=0; rootfs_start build "$BUILD_PACKAGES"; }
made "$NODE" "$node_image_key" && have_node=1 || { have_node=0; made "$NODE_BASE" "$node_key" || rootfs_start node "$NODE_PACKAGES"; }
rootfs_wait

[ $have_debian = 1 ] || import "$(fspath runtime "$RUNTIME_PACKAGES")" "$DEBIAN" "$runtime_key"

# golang: the build root file system, the host's Go tool chain (the 1.26 the tag names) in /usr/local/go and go.mod's
# modules in the module cache /go/pkg/mod (taken from the host's module cache as a file proxy, and from the Go module
# proxy for what it lacks), appended to the root file system's tar and imported as one layer: a COPY of them into a
# docker build took five minutes on vfs. GOPROXY=off: the Dockerfile's build has no network, and a missing module
# fails at once rather than hangs.
if [ $have_golang = 0 ]; then
	ctx=$(context)
	mkdir -p "$ctx/usr/local"
	cp -a "$($GO env GOROOT)" "$ctx/usr/local/go"
	hostmod=$($GO env GOMODCACHE)
	(cd "$repo" && GOMODCACHE="$ctx/go/pkg/mod" GOFLAGS="-mod=mod -modcacherw" \
		GOPROXY="file://$hostmod/cache/download,$($GO env GOPROXY)" $GO mod download)
	cp "$(fspath build "$BUILD_PACKAGES")" "$ctx/rootfs.tar"
	# A tar of its own (pax: module paths outgrow ustar's names), concatenated.
	tar -cf "$ctx/go.tar" --format=pax -C "$ctx" --owner=0 --group=0 ./usr/local/go ./go
	tar -Af "$ctx/rootfs.tar" "$ctx/go.tar"
	docker import --change "LABEL io.sleipnir.inputs=$golang_key" --change "WORKDIR /go" \
		--change "ENV GOPATH=/go GOTOOLCHAIN=local GOPROXY=off PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		"$ctx/rootfs.tar" "$GOLANG" >/dev/null
	rm -rf "$ctx"
	say "$GOLANG: imported ($goversion, go.mod's modules)"
fi

nats_key=$(key "$runtime_key" "$(filekey "$NATS_SERVER")" "$(filekey "$here/nats.Dockerfile")")
if ! made "$NATS" "$nats_key"; then
	ctx=$(context)
	cp "$NATS_SERVER" "$ctx/nats-server"
	build "$NATS" "$nats_key" "$here/nats.Dockerfile" "$ctx"
fi

jaeger_key=$(key "$runtime_key" "$(filekey "$JAEGER")" "$(filekey "$here/jaeger.Dockerfile")")
if ! made "$JAEGER_IMAGE" "$jaeger_key"; then
	ctx=$(context)
	cp "$JAEGER" "$ctx/jaeger"
	build "$JAEGER_IMAGE" "$jaeger_key" "$here/jaeger.Dockerfile" "$ctx"
fi

# Prometheus: the binary of Debian's package, as apt-get downloads it.
mkdir -p "$cache/debs"
deb=$(ls "$cache"/debs/prometheus_*.deb 2>/dev/null | tail -1 || true)
if [ -z "$deb" ]; then
	(cd "$cache/debs" && { apt-get download -q prometheus >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get download -q prometheus >/dev/null; }; })
	deb=$(ls "$cache"/debs/prometheus_*.deb | tail -1)
fi
prometheus_key=$(key "$runtime_key" "$(basename "$deb")" "$(filekey "$here/prometheus.Dockerfile")")
if ! made "$PROMETHEUS" "$prometheus_key"; then
	ctx=$(context)
	dpkg-deb -x "$deb" "$ctx/deb"
	mv "$ctx/deb/usr/bin/prometheus" "$ctx/prometheus"
	rm -rf "$ctx/deb"
	build "$PROMETHEUS" "$prometheus_key" "$here/prometheus.Dockerfile" "$ctx"
fi

# node: Debian's Node.js, npm's own package (npm pack: no install scripts run).
if [ $have_node = 0 ]; then
	made "$NODE_BASE" "$node_key" >/dev/null || import "$(fspath node "$NODE_PACKAGES")" "$NODE_BASE" "$node_key"
	tgz="$cache/npm-${NPM#npm@}.tgz"
	[ -f "$tgz" ] || (cd "$cache" && npm pack --silent "$NPM" >/dev/null)
	ctx=$(context)
	(cd "$ctx" && tar xzf "$tgz" && mv package npm)
	build "$NODE" "$node_image_key" "$here/node.Dockerfile" "$ctx" "BASE=$NODE_BASE"
fi
