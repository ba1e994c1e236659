#!/usr/bin/env bash
# Builds stepserve on an air-gapped CUDA host (Ubuntu 24.04 + CUDA 13, no Abseil/gRPC/network)
# from Debian 12 packages fetched beforehand on a machine with network access.
#
#   bash scripts/bundle-deps.sh download            # here: .debs/*.deb (git-ignored)
#   bash scripts/bundle-deps.sh prefix              # there: unpack into .deps/prefix, fix paths
#   bash scripts/bundle-deps.sh build DIR [TARGET...] [-- CMAKE_ARGS...]
#                                                   # there: prefix + configure DIR + build
#   source <(bash scripts/bundle-deps.sh env)       # there: LD_LIBRARY_PATH/CMAKE_PREFIX_PATH
#
# Packages are unpacked with `dpkg -x` into a prefix inside the working tree, never into /, so the
# host's own libraries are untouched. gRPC, protobuf and prometheus-cpp are not bundled: without
# them the top-level CMakeLists skips the gRPC server, and the engine, the CUDA kernels and their
# tests build alone. NCCL is not bundled either: point NCCL_HOME at the Python nvidia-nccl package
# (python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])').
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
debs="$root/.debs"
prefix="$root/.deps/prefix"
arch_dir=lib/x86_64-linux-gnu

packages=(libabsl-dev libabsl20220623 libgtest-dev libgmock-dev)

env_lines() {
  echo "export CMAKE_PREFIX_PATH=\"$prefix/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}\""
  echo "export LD_LIBRARY_PATH=\"$prefix/usr/$arch_dir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
  echo "export PKG_CONFIG_PATH=\"$prefix/usr/$arch_dir/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}\""
}

make_prefix() {
  shopt -s nullglob
  local files=("$debs"/*.deb)
  if ((${#files[@]} == 0)); then
    echo "bundle-deps: no packages in $debs; run 'bash scripts/bundle-deps.sh download' where" \
      "apt works and copy .debs/ here" >&2
    exit 1
  fi
  rm -rf "$prefix"
  mkdir -p "$prefix"
  for f in "${files[@]}"; do dpkg -x "$f" "$prefix"; done
  # pkg-config files name /usr as their prefix; CMake configs locate themselves (_IMPORT_PREFIX).
  find "$prefix" -name '*.pc' -print0 |
    xargs -0 -r sed -i "s|^prefix=/usr\$|prefix=$prefix/usr|"
  # Any CMake file that still hard-codes /usr/include or /usr/lib of a bundled package.
  grep -rlE '"/usr/(include|lib)' "$prefix/usr/$arch_dir/cmake" 2>/dev/null |
    xargs -r sed -i -E "s#\"/usr/(include|lib)#\"$prefix/usr/\\1#g" || true
  echo "bundle-deps: unpacked ${#files[@]} packages into $prefix" >&2
}

case "${1:-}" in
  download)
    mkdir -p "$debs"
    (cd "$debs" && apt-get download "${packages[@]}")
    du -sh "$debs"
    ;;
  prefix)
    make_prefix
    env_lines
    ;;
  env)
    env_lines
    ;;
  build)
    shift
    build_dir=${1:?usage: bundle-deps.sh build DIR [TARGET...] [-- CMAKE_ARGS...]}
    shift
    targets=()
    while (($# > 0)) && [[ $1 != -- ]]; do
      targets+=("$1")
      shift
    done
    if (($# > 0)); then shift; fi
    make_prefix
    eval "$(env_lines)"
    generator=()
    if command -v ninja >/dev/null; then generator=(-G Ninja); fi
    cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix/usr" "$@"
    target_args=()
    for t in "${targets[@]}"; do target_args+=(--target "$t"); done
    cmake --build "$build_dir" --parallel "$(nproc)" "${target_args[@]}"
    ;;
  *)
    sed -n '2,16p' "$0" >&2
    exit 2
    ;;
esac
