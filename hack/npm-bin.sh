#!/usr/bin/env bash
# Installs one executable from a package of the npm registry, for a tool whose authors publish its
# release binaries there (buf: @bufbuild/buf-linux-x64). The tarball is checked against a pinned
# SHA-512 and cached outside the repository, like the Kubernetes binaries (hack/kube-bins.sh).
#   npm-bin.sh PACKAGE VERSION SHA512 PATH-IN-PACKAGE DEST
set -euo pipefail

[ $# -eq 5 ] || { echo "usage: $0 PACKAGE VERSION SHA512 PATH-IN-PACKAGE DEST" >&2; exit 2; }
pkg=$1 version=$2 sum=$3 file=$4 dest=$5
name=${pkg##*/}
cache=${S3CSI_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/s3csi}/npm
tgz="$cache/$name-$version.tgz"

mkdir -p "$cache"
if ! echo "$sum  $tgz" | sha512sum --check --status 2>/dev/null; then
  url="https://registry.npmjs.org/$pkg/-/$name-$version.tgz"
  curl -sSfL --retry 3 -o "$tgz.part" "$url"
  if ! echo "$sum  $tgz.part" | sha512sum --check --status; then
    echo "npm-bin: $url does not have the pinned SHA-512 (got $(sha512sum "$tgz.part" | cut -d' ' -f1))" >&2
    rm -f "$tgz.part"
    exit 1
  fi
  mv "$tgz.part" "$tgz"
fi
mkdir -p "$(dirname "$dest")"
tar -xzOf "$tgz" "package/$file" > "$dest.part"
chmod 0755 "$dest.part"
mv "$dest.part" "$dest"
