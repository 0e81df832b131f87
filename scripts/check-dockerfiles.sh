#!/usr/bin/env bash
# Checks the Dockerfiles without Docker, as far as a plain Debian shell can:
#
#   - every apt package a Dockerfile installs exists (apt-cache show), when
#     this machine runs the Debian release of the Dockerfile's stage;
#   - the build stage's Go toolchain (golang:X.Y-...) is go.mod's X.Y;
#   - the build stage's `go build` commands succeed, with the same flags,
#     into a temporary directory standing for /out;
#   - every file a later stage copies from the build stage (/out/...) was
#     built;
#   - every shared library a built program needs belongs to a package the
#     final stage installs (or to what those depend on, or to the base
#     image's required packages).
#
# It does not pull images, run a container, or run the programs. Needs Go,
# the build stage's packages (libvips-dev, pkg-config: make setup installs
# them) and apt-cache/dpkg.
#
#   scripts/check-dockerfiles.sh [DOCKERFILE...]   default: Dockerfile*
set -euo pipefail
cd "$(dirname "$0")/.."

files=("$@")
[[ ${#files[@]} -gt 0 ]] || files=(Dockerfile Dockerfile.*)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
host_release=$(. /etc/os-release && echo "${VERSION_CODENAME:-unknown}")
go_minor=$(awk '$1 == "go" { split($2, v, "."); print v[1] "." v[2] }' go.mod)
failures=0
fail() { echo "FAIL $*" >&2; failures=$((failures + 1)); }

# apt-cache answers only with package lists: a fresh machine (or a
# container image) may have none yet.
if ! apt-cache show --no-all-versions ca-certificates >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]]; then
    echo "apt has no package lists: running apt-get update"
    apt-get update -qq
  else
    echo "apt has no package lists: run sudo apt-get update first" >&2
    exit 1
  fi
fi

declare -A built=()   # go build command -> done
declare -A closures=() # package list -> file holding its dependency closure

# present_packages prints the packages installed in an image whose stage
# installs the given packages: their dependency closure and the packages of
# priority "required" (what a Debian base image holds).
present_packages() {
  local key="$*"
  if [[ -z ${closures[$key]:-} ]]; then
    local f="$tmp/closure.${#closures[@]}"
    {
      apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
        --no-breaks --no-replaces --no-enhances "$@" | grep -v '^ ' | grep -v '^<'
      dpkg-query -W -f '${Package} ${Priority}\n' | awk '$2 == "required" { print $1 }'
    } | sed 's/:.*//' | sort -u >"$f"
    closures[$key]=$f
  fi
  cat "${closures[$key]}"
}

# package_of prints the package owning a shared library file.
package_of() {
  local lib=$1 p
  for p in "$lib" "$(realpath "$lib")" "/usr$lib" "${lib#/usr}"; do
    if dpkg -S "$p" 2>/dev/null | head -1 | cut -d: -f1; then
      return 0
    fi
  done
  return 1
}

for df in "${files[@]}"; do
  echo "== $df"
  # Continuation lines joined, comments dropped.
  mapfile -t lines < <(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$df" | grep -v '^\s*#' | grep -v '^\s*$')
  release="" stage_packages=() copied=()
  for line in "${lines[@]}"; do
    read -r instr rest <<<"$line"
    case "$instr" in
      FROM)
        image=${rest%% *}
        release=""
        for r in bookworm bullseye trixie; do [[ $image == *"$r"* ]] && release=$r; done
        stage_packages=() copied=()
        if [[ $image == golang:* ]]; then
          tag=${image#golang:}
          [[ ${tag%%-*} == "$go_minor" ]] || fail "$df: $image is not Go $go_minor (go.mod)"
        fi
        ;;
      RUN)
        # One shell command per && part.
        while IFS= read -r part; do
          part=$(sed 's/^ *//; s/ *$//' <<<"$part")
          if [[ $part == "apt-get install "* ]]; then
            for pkg in ${part#apt-get install }; do
              [[ $pkg == -* ]] && continue
              stage_packages+=("$pkg")
              if [[ $release != "$host_release" ]]; then
                echo "   skip apt $pkg: the stage is Debian ${release:-unknown}, this machine $host_release"
              elif apt-cache show --no-all-versions "$pkg" >/dev/null 2>&1; then
                echo "   ok   apt $pkg"
              else
                fail "$df: no apt package $pkg in Debian $release"
              fi
            done
          elif [[ $part == *"go build "* ]]; then
            cmd=${part// \/out\// $tmp/out/}
            if [[ -n ${built[$cmd]:-} ]]; then
              echo "   ok   $part (built already)"
            elif (set -x; bash -c "$cmd"); then
              built[$cmd]=1
              echo "   ok   $part"
            else
              fail "$df: $part"
            fi
          fi
        done < <(sed 's/&&/\n/g' <<<"$rest")
        ;;
      COPY)
        if [[ $rest == --from=* ]]; then
          read -ra words <<<"${rest#--from=* }"
          for src in "${words[@]:0:${#words[@]}-1}"; do
            if [[ $src == /out/* ]]; then
              if [[ -f $tmp$src ]]; then
                copied+=("$tmp$src")
              else
                fail "$df: copies $src, which the build stage does not make"
              fi
            fi
          done
        fi
        ;;
    esac
  done

  # The final stage: the libraries of what it copies are installed.
  if [[ $release == "$host_release" && ${#copied[@]} -gt 0 ]]; then
    present=$(present_packages "${stage_packages[@]}")
    for bin in "${copied[@]}"; do
      readelf -d "$bin" 2>/dev/null | grep -q NEEDED || { echo "   ok   ${bin#"$tmp"} is static"; continue; }
      while read -r soname path; do
        if [[ -z $path || $path == "not" ]]; then
          fail "$df: ${bin#"$tmp"} needs $soname, which this machine lacks"
          continue
        fi
        pkg=$(package_of "$path") || { fail "$df: no package owns $path (${bin#"$tmp"} needs $soname)"; continue; }
        if grep -qx "$pkg" <<<"$present"; then
          echo "   ok   ${bin#"$tmp"} needs $soname ($pkg)"
        else
          fail "$df: ${bin#"$tmp"} needs $soname from $pkg, which the final stage does not install (installs: ${stage_packages[*]})"
        fi
      done < <(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | while read -r so; do
        echo "$so $(ldd "$bin" | awk -v so="$so" '$1 == so { print $3 }')"
      done)
    done
  fi
done

if [[ $failures -gt 0 ]]; then
  echo "check-dockerfiles: $failures problem(s)" >&2
  exit 1
fi
echo "check-dockerfiles: ok (${files[*]})"
