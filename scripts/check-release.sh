#!/usr/bin/env bash
# Checks what scripts/release.sh promises: one tarball, named for the version and the machine, whose binary
# starts alone in an empty directory with an empty environment (no Swift on the library path) and names this
# version and commit; with its man pages, completions and docs.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "check-release: $*" >&2; exit 1; }

scripts/release.sh >/tmp/risc-release.out
tarball=$(tail -n 1 /tmp/risc-release.out)
version=$(sed -n 's/^    public static let version = "\(.*\)"$/\1/p' Sources/RISC/Release.swift)
arch=$(uname -m | sed 's/amd64/x86_64/; s/arm64/aarch64/')
[ "$tarball" = "dist/risc-receiver-$version-linux-$arch.tar.gz" ] || fail "unexpected tarball name: $tarball"

unpacked=$(mktemp -d /tmp/risc-release-check.XXXXXX)
trap 'rm -rf "$unpacked"' EXIT
tar -C "$unpacked" -xzf "$tarball"
root="$unpacked/risc-receiver-$version-linux-$arch"
for path in bin/risc-receiver share/man/man1/risc-receiver.1 share/man/man1/risc-receiver.serve.1 \
  share/completions/risc-receiver.bash share/completions/risc-receiver.zsh share/completions/risc-receiver.fish \
  LICENSE README.md CHANGELOG.md docs/operations.md deploy/Dockerfile; do
  [ -s "$root/$path" ] || fail "the tarball lacks $path"
done
[ ! -e "$root/deploy/.env" ] || fail "the tarball carries deploy/.env"

# Alone: a copy in an empty directory, no environment, so no Swift toolchain on any path.
alone=$(mktemp -d /tmp/risc-release-alone.XXXXXX)
trap 'rm -rf "$unpacked" "$alone"' EXIT
cp "$root/bin/risc-receiver" "$alone/"
libraries=$(ldd "$alone/risc-receiver")
if grep -E 'libswift|libFoundation|libdispatch|libBlocksRuntime|not found' <<<"$libraries"; then
  fail "the binary needs the libraries above"
fi
printed=$(cd "$alone" && env -i ./risc-receiver --version)
commit=$(git rev-parse --short=12 HEAD)
[ "$printed" = "$version ($commit)" ] || fail "--version printed '$printed', not '$version ($commit)'"
help=$(cd "$alone" && env -i ./risc-receiver --help)
grep -q "USAGE: risc-receiver" <<<"$help" || fail "--help did not print the usage"
sections=$(readelf --section-headers "$alone/risc-receiver")
if grep -q '\.symtab' <<<"$sections"; then fail "the binary is not stripped"; fi
echo "check-release: $tarball: $(du -h "$tarball" | cut -f1), the binary alone prints '$printed'"
