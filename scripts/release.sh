#!/usr/bin/env bash
# Builds the release tarball: dist/risc-receiver-VERSION-linux-ARCH.tar.gz, holding
#   bin/risc-receiver          release build, Swift's runtime linked in (--static-swift-stdlib), stripped:
#                              it needs only glibc, libstdc++ and zlib, so it runs on a server without Swift
#   share/man/man1/*.1         a man page for each command
#   share/completions/         bash, zsh and fish completion scripts
#   LICENSE, README.md, CHANGELOG.md, docs/, deploy/
# It then checks what it built: the binary links no Swift library, and `--version` names this version and commit.
# The benchmarks run this same build (.build-release), so neither compiles the other's code again.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/release-build.sh

if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "scripts/release.sh: warning: uncommitted changes are built, but --version names the commit $(git rev-parse --short=12 HEAD)" >&2
fi
release_build
version=$("$release_bin" --version | awk '{print $1}')
case "$(uname -m)" in
  x86_64 | amd64) arch=x86_64 ;;
  aarch64 | arm64) arch=aarch64 ;;
  *) arch=$(uname -m) ;;
esac
name="risc-receiver-$version-linux-$arch"
staging=$(mktemp -d /tmp/risc-release.XXXXXX)
trap 'rm -rf "$staging"' EXIT
root="$staging/$name"
mkdir -p "$root/bin" "$root/share/man/man1" "$root/share/completions" dist

echo "==> $name: the binary, stripped"
cp "$release_bin" "$root/bin/risc-receiver"
strip "$root/bin/risc-receiver"
if ldd "$root/bin/risc-receiver" | grep -E 'libswift|libFoundation|libdispatch|libBlocksRuntime'; then
  echo "scripts/release.sh: the binary still links the Swift runtime (above)" >&2
  exit 1
fi

echo "==> man pages (the GenerateManual plugin of swift-argument-parser, from the debug build's command tree)"
manuals=.build/plugins/GenerateManual/outputs
rm -rf "$manuals"
swift package --allow-writing-to-package-directory generate-manual --configuration debug --multi-page \
  --authors "the risc-receiver authors" >"$staging/manual.log" 2>&1 || { cat "$staging/manual.log" >&2; exit 1; }
find "$manuals" -name '*.1' -exec cp {} "$root/share/man/man1/" \;
[ -f "$root/share/man/man1/risc-receiver.1" ] || { echo "scripts/release.sh: generate-manual wrote no risc-receiver.1" >&2; exit 1; }

echo "==> shell completions"
for shell in bash zsh fish; do
  "$root/bin/risc-receiver" --generate-completion-script "$shell" >"$root/share/completions/risc-receiver.$shell"
done

# The committed files, not whatever else lies in the work tree (a filled-in secret, say).
git archive --format=tar HEAD LICENSE README.md CHANGELOG.md docs deploy | tar -x -C "$root"
tar -C "$staging" -czf "dist/$name.tar.gz" "$name"
echo "dist/$name.tar.gz"
