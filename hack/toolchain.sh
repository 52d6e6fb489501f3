#!/usr/bin/env bash
# Obtains every binary the local cluster needs, pinned, into a version-keyed
# cache outside the repo. A cold run builds Go binaries (~12 min on 2 cores,
# module cache included); a warm run only checks that each binary is there.
set -euo pipefail

# shellcheck source=../devcluster/src/kvant_dev/versions.env
source "$(dirname "$0")/../devcluster/src/kvant_dev/versions.env"
CACHE="${KVANT_CACHE:-$HOME/.cache/kvant}"
BIN="$CACHE/bin"
mkdir -p "$BIN"
# Go's module and build caches default to ~/go and ~/.cache/go-build: kept in Kvant's cache instead,
# so a build writes nowhere else on the host.
export GOPATH="$CACHE/go" GOCACHE="$CACHE/go/build-cache"

log() { printf '[toolchain %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# A wrapper module is needed because k8s.io/kubernetes and etcd replace their
# sibling modules with relative paths, which `go install` refuses. The replace
# list is derived from the upstream go.mod so a version bump needs no edits.
wrapper_replaces() { # $1 module@version, $2 version for the siblings
  local gomod
  gomod=$(go mod download -json "$1" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
  # Only lines of a `replace (` block that point at a relative path qualify.
  awk -v v="$2" '$2 == "=>" && $3 ~ /^\.\.?\// {print "replace " $1 " => " $1 " " v}' "$gomod"
}

build_kube() {
  local out="$BIN/kube-$KUBE_VERSION"
  local cmds=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy)
  local have=1 c
  for c in "${cmds[@]}"; do [[ -x "$out/$c" ]] || have=0; done
  if (( have )); then return; fi
  log "building ${cmds[*]} $KUBE_VERSION (cold: ~4 min on 2 cores)"
  local work; work=$(mktemp -d)
  local minor="${KUBE_VERSION#v1.}"; local staging="v0.${minor}"
  {
    echo "module kvant.local/kubebuild"; echo "go 1.26"
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    wrapper_replaces "k8s.io/kubernetes@$KUBE_VERSION" "$staging"
  } > "$work/go.mod"
  local major_minor="${KUBE_VERSION%.*}"
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION"
  ld+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${major_minor#v1.}"
  ld+=" -X k8s.io/component-base/version.gitTreeState=clean"
  (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$work/out/" \
      "${cmds[@]/#/k8s.io/kubernetes/cmd/}")
  mkdir -p "$out.tmp" && mv "$work"/out/* "$out.tmp/" && rm -rf "$out" && mv "$out.tmp" "$out"
  rm -rf "$work"
}

build_etcd() {
  local out="$BIN/etcd-$ETCD_VERSION"
  if [[ -x "$out/etcd" ]]; then return; fi
  log "building etcd $ETCD_VERSION"
  local work; work=$(mktemp -d)
  {
    echo "module kvant.local/etcdbuild"; echo "go 1.26"
    echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
    wrapper_replaces "go.etcd.io/etcd/server/v3@$ETCD_VERSION" "$ETCD_VERSION"
  } > "$work/go.mod"
  (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/etcd" go.etcd.io/etcd/server/v3)
  mkdir -p "$out" && mv "$work/etcd" "$out/etcd.tmp" && mv "$out/etcd.tmp" "$out/etcd"
  rm -rf "$work"
}

# SeaweedFS (the local S3 server). Its go.mod replaces go-bip39 with a fork, which `go install`
# refuses, so the wrapper module carries that replace (every non-relative one, read from upstream).
build_seaweedfs() {
  local out="$BIN/seaweedfs-$SEAWEEDFS_VERSION"
  if [[ -x "$out/weed" ]]; then return; fi
  log "building SeaweedFS $SEAWEEDFS_VERSION (cold: ~5 min on 2 cores)"
  local work; work=$(mktemp -d)
  local mod="github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION" gomod
  gomod=$(go mod download -json "$mod" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
  {
    echo "module kvant.local/seaweedfsbuild"; echo "go 1.26"
    echo "require github.com/seaweedfs/seaweedfs $SEAWEEDFS_VERSION"
    awk '$1 == "replace" && $3 == "=>" && $4 !~ /^\.\.?\// {print}' "$gomod"
  } > "$work/go.mod"
  (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/weed" \
      github.com/seaweedfs/seaweedfs/weed)
  mkdir -p "$out.tmp" && mv "$work/weed" "$out.tmp/weed" && rm -rf "$out" && mv "$out.tmp" "$out"
  rm -rf "$work"
}

# prometheus-adapter (the custom metrics API the HPA reads). `go install module@version` cannot be
# used: the proxy refuses its version list (403), which `go install` asks for; a wrapper module that
# requires the exact version needs no list.
build_prometheus_adapter() {
  local out="$BIN/prometheus-adapter-$PROMETHEUS_ADAPTER_VERSION"
  if [[ -x "$out/adapter" ]]; then return; fi
  log "building prometheus-adapter $PROMETHEUS_ADAPTER_VERSION (cold: ~5 min on 2 cores)"
  local work; work=$(mktemp -d)
  {
    echo "module kvant.local/adapterbuild"; echo "go 1.26"
    echo "require sigs.k8s.io/prometheus-adapter $PROMETHEUS_ADAPTER_VERSION"
  } > "$work/go.mod"
  (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/adapter" \
      sigs.k8s.io/prometheus-adapter/cmd/adapter)
  mkdir -p "$out.tmp" && mv "$work/adapter" "$out.tmp/adapter" && rm -rf "$out" && mv "$out.tmp" "$out"
  rm -rf "$work"
}

# `go install` of one command at a pinned version into $BIN/$1-$2 (modules without relative replaces).
go_install() { # $1 name, $2 version, $3 package path
  local out="$BIN/$1-$2"
  if [[ -x "$out/$1" ]]; then return; fi
  log "building $1 $2"
  GOBIN="$out.tmp" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "$3@$2"
  rm -rf "$out" && mv "$out.tmp" "$out"
}

# The kstatus helper (hack/kstatus), keyed by cli-utils' version and a hash of its source, so an
# edit of the helper rebuilds it. kvant_dev.toolchain computes the same key.
build_kstatus() {
  local src; src="$(cd "$(dirname "$0")/kstatus" && pwd)"
  local key; key=$(cd "$src" && sha256sum go.mod go.sum main.go | sha256sum | cut -c1-8)
  local out="$BIN/kstatus-$CLI_UTILS_VERSION-$key"
  if [[ -x "$out/kstatus" ]]; then return; fi
  grep -q "sigs.k8s.io/cli-utils $CLI_UTILS_VERSION" "$src/go.mod" \
    || { log "hack/kstatus/go.mod does not pin cli-utils $CLI_UTILS_VERSION"; return 1; }
  log "building the kstatus helper (cli-utils $CLI_UTILS_VERSION)"
  (cd "$src" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w" -o "$out.tmp/kstatus" .)
  rm -rf "$out" && mv "$out.tmp" "$out"
}

# Unpacks Debian packages into $BIN/$1 with dpkg -x: nothing is installed on the host.
unpack_debs() { # $1 folder name, $2 file that proves it is complete, then the packages
  local out="$BIN/$1" proof="$2"; shift 2
  if [[ -x "$out/$proof" ]]; then return; fi
  log "unpacking Debian's $* (nothing is installed on the host)"
  local work; work=$(mktemp -d)
  (cd "$work" && { apt-get download "$@" 2>/dev/null || { apt-get update -qq && apt-get download "$@"; }; })
  local deb; for deb in "$work"/*.deb; do dpkg -x "$deb" "$out.tmp"; done
  rm -rf "$out" && mv "$out.tmp" "$out" && rm -rf "$work"
}

build_etcd
build_kube
go_install helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm
go_install coredns "$COREDNS_VERSION" github.com/coredns/coredns
build_kstatus
build_seaweedfs
build_prometheus_adapter
unpack_debs prometheus-deb usr/bin/prometheus prometheus
# kube-proxy's nftables mode runs the `nft` command; its libraries travel with it (LD_LIBRARY_PATH).
unpack_debs nftables-deb usr/sbin/nft nftables libnftables1 libnftnl11 libmnl0 libjansson4 libxtables12
log "binaries ready in $BIN"
# The real SGLang engine's environment, the "image" the node agent runs lmsysorg/sglang images from.
bash "$(dirname "$0")/engine-image.sh" >/dev/null
log "engine image ready"
