#!/usr/bin/env bash
# Builds the Go programs vkpy's tests and benchmarks run, from Go modules pinned in
# this folder, into a cache outside the checkout. Does nothing when they are there.
#
#   controlplane/build.sh            the local Kubernetes control plane (kube-apiserver,
#                                    kube-controller-manager, kube-scheduler, kubectl, etcd)
#   controlplane/build.sh TOOL       another pinned tool: controlplane/tools/TOOL/ holds its
#                                    go.mod/go.sum and a `targets` file ("binary package"
#                                    per line, optional `ldflags` file); prints its directory
#   VKPY_CONTROLPLANE_BIN=/dir ...   use control-plane binaries you already have
#
# The cache lives in ${VKPY_CACHE:-~/.cache/vkpy}/controlplane/<release>-<hash of the
# pins> (tools: .../tools/TOOL-<hash>), so changing a pin builds into a fresh directory.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
start=$(date +%s)
ldflags="-s -w"

# Reads `go build -v` output: counts packages compiled and modules downloaded, prints
# a progress line now and then, and passes anything else (compiler errors) through.
progress() {
  local step=$1 total=$2 built=0 fetched=0 last=$SECONDS line
  while IFS= read -r line; do
    case $line in
      "go: downloading "*) fetched=$((fetched + 1)) ;;
      *" "* | "#"* | "") printf '%s\n' "$line" >&2 ;;
      *) built=$((built + 1)) ;;
    esac
    if (( SECONDS - last >= 15 )); then
      last=$SECONDS
      printf '  %s: %d of about %d packages compiled, %d modules downloaded, %dm%02ds elapsed\n' \
        "$step" "$built" "$total" "$fetched" $(( ($(date +%s) - start) / 60 )) $(( ($(date +%s) - start) % 60 )) >&2
    fi
  done
  printf '  %s: done, %d packages compiled, %dm%02ds elapsed\n' \
    "$step" "$built" $(( ($(date +%s) - start) / 60 )) $(( ($(date +%s) - start) % 60 )) >&2
}

# build STEP DIR OUTPUT PACKAGE...: one `go build` with progress on stderr.
build() {
  local step=$1 dir=$2 output=$3
  shift 3
  local total
  echo "[$step] resolving $* (downloads modules the first time)" >&2
  total=$(cd "$dir" && go list -deps "$@" 2>/dev/null | wc -l) || total=0
  echo "[$step] compiling" >&2
  (cd "$dir" && go build -v -trimpath -ldflags "$ldflags" -o "$output" "$@") 2>&1 | progress "$step" "$total"
}

# build_tool TOOL: builds controlplane/tools/TOOL into the cache once, prints its directory.
build_tool() {
  local tool=$1 dir="$here/tools/$1"
  if [[ ! -f "$dir/targets" ]]; then
    echo "unknown tool '$tool': no $dir/targets (tools: $(ls "$here/tools" 2>/dev/null | tr '\n' ' '))" >&2
    exit 2
  fi
  local hash
  hash=$({ cat "$dir"/go.mod "$dir"/go.sum "$dir"/targets; [[ ! -f "$dir/ldflags" ]] || cat "$dir/ldflags"; } | sha256sum | cut -c1-12)
  local dest="${VKPY_CACHE:-$HOME/.cache/vkpy}/controlplane/tools/$tool-$hash"
  local names=() pkgs=() name pkg
  while read -r name pkg; do
    [[ -z "$name" || "$name" == \#* ]] && continue
    names+=("$name"); pkgs+=("$pkg")
  done <"$dir/targets"
  tool_done() { local n; for n in "${names[@]}"; do [[ -x "$dest/$n" ]] || return 1; done; }
  if tool_done; then echo "$dest"; exit 0; fi
  if ! command -v go >/dev/null 2>&1; then
    echo "Go is not installed: install Go 1.26+ to build $tool" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$dest")"
  exec 9>"$dest.lock"
  flock 9
  if tool_done; then echo "$dest"; exit 0; fi
  rm -rf "$dest.partial"
  mkdir -p "$dest.partial"
  [[ -f "$dir/ldflags" ]] && ldflags="-s -w $(tr '\n' ' ' <"$dir/ldflags")"
  export CGO_ENABLED=0 GOFLAGS=-mod=mod
  echo "building $tool into $dest" >&2
  local i
  for i in "${!names[@]}"; do
    build "$tool $((i + 1))/${#names[@]} ${names[$i]}" "$dir" "$dest.partial/${names[$i]}" "${pkgs[$i]}"
  done
  rm -rf "$dest"
  mv "$dest.partial" "$dest"
  echo "built $tool in $(( $(date +%s) - start )) s" >&2
  echo "$dest"
  exit 0
}

if [[ $# -gt 0 ]]; then
  build_tool "$1"
fi

release=$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd)

if [[ -n "${VKPY_CONTROLPLANE_BIN:-}" ]]; then
  for b in "${binaries[@]}"; do
    if [[ ! -x "$VKPY_CONTROLPLANE_BIN/$b" ]]; then
      echo "VKPY_CONTROLPLANE_BIN=$VKPY_CONTROLPLANE_BIN has no executable $b" >&2
      exit 1
    fi
  done
  echo "$VKPY_CONTROLPLANE_BIN"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "Go is not installed: install Go 1.26+ to build the control plane," >&2
  echo "or set VKPY_CONTROLPLANE_BIN to a directory holding: ${binaries[*]}" >&2
  exit 1
fi

pins=$(cat "$here/go.mod" "$here/go.sum" "$here/etcd/go.mod" "$here/etcd/go.sum" | sha256sum | cut -c1-12)
out="${VKPY_CACHE:-$HOME/.cache/vkpy}/controlplane/$release-$pins"
missing=0
for b in "${binaries[@]}"; do [[ -x "$out/$b" ]] || missing=1; done
if [[ $missing == 0 ]]; then
  echo "$out"
  exit 0
fi

# One build at a time: a second caller waits for the first, then finds the binaries.
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
flock 9
missing=0
for b in "${binaries[@]}"; do [[ -x "$out/$b" ]] || missing=1; done
if [[ $missing == 0 ]]; then
  echo "$out"
  exit 0
fi

rm -rf "$out.partial"
mkdir -p "$out.partial"
minor=$(echo "$release" | cut -d. -f2)
stamp=$(date -u +%Y-%m-%dT%H:%M:%SZ)
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$release -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$stamp"
done

export CGO_ENABLED=0 GOFLAGS=-mod=mod
echo "building Kubernetes $release control plane into $out" >&2
echo "(the first build takes about 12 minutes on 2 cores; progress every 15 s)" >&2

k8s=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
build "1/2 kubernetes" "$here" "$out.partial/" "${k8s[@]/#/k8s.io/kubernetes/cmd/}"
ldflags="-s -w"
build "2/2 etcd" "$here/etcd" "$out.partial/etcd" go.etcd.io/etcd/server/v3
rm -rf "$out"
mv "$out.partial" "$out"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$out"
