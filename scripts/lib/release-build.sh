# The release build (sourced): Swift's runtime linked in, the commit it was built from named in --version.
# The release tarball and the benchmarks share it, so a benchmark measures the binary that ships.
# It has a scratch folder of its own, .build-release: SwiftPM locks a scratch folder for the length of a build, and
# scripts/test.sh builds this one beside the debug build and the tests that run from .build.
# Sets release_bin.
release_scratch=.build-release
release_build() {
  local build=(swift build --scratch-path "$release_scratch" -c release --static-swift-stdlib)
  # scripts/test.sh builds it once for all its stages: a build with nothing to do still takes SwiftPM half a
  # minute to plan.
  if [ -n "${RISC_RELEASE_BUILT:-}" ]; then
    release_bin=$RISC_RELEASE_BUILT/risc-receiver
    return 0
  fi
  "${build[@]}" --product risc-receiver >/dev/null 2>&1 || {
    "${build[@]}" --product risc-receiver 2>&1 | tail -40 >&2
    echo "error: the release build failed (${build[*]})" >&2
    return 1
  }
  release_bin=$("${build[@]}" --show-bin-path)/risc-receiver
}
