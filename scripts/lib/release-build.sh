# The release build (sourced): Swift's runtime linked in, the commit it was built from named in --version.
# The release tarball and the benchmarks share it, so a benchmark measures the binary that ships.
# Sets release_bin.
release_build() {
  swift build -c release --static-swift-stdlib --product risc-receiver >/dev/null 2>&1 || {
    swift build -c release --static-swift-stdlib --product risc-receiver 2>&1 | tail -40 >&2
    echo "error: the release build failed (swift build -c release --static-swift-stdlib)" >&2
    return 1
  }
  release_bin=$(swift build -c release --static-swift-stdlib --show-bin-path)/risc-receiver
}
