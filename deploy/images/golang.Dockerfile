# golang:1.26-bookworm, made here: Debian bookworm with the C tool chain and the packages deploy/Dockerfile's build
# stage needs (imported from mmdebstrap's root file system), the host's Go tool chain, and a module cache holding
# go.mod's modules (GOPROXY=off: the build has no network, and a missing module fails at once rather than hangs).
ARG BASE
FROM ${BASE}
COPY go /usr/local/go
COPY mod /go/pkg/mod
ENV GOPATH=/go GOTOOLCHAIN=local GOPROXY=off PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /go
