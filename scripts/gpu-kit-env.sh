# Sourced by scripts/gpu-check.sh, gpu-kit-selftest.sh and cuda-compile-check.sh: unpacks the .debs
# that scripts/gpu-kit-fetch.sh downloaded into a local prefix (once) and points the build at it.
# Sets KIT_PREFIX and KIT_CMAKE_ARGS; exports PATH, LD_LIBRARY_PATH and PKG_CONFIG_LIBDIR.
# Needs: KIT_DEBS (default .gpu-kit/debs) and KIT_PREFIX (default .gpu-kit/prefix), repo-relative.
# What a GPU machine builds (scripts/gpu-check.sh) and what scripts/cuda-compile-check.sh compiles
# here against a CUDA LibTorch beforehand.
GPU_BUILD_TARGETS=(dtrun dtdata allreduce_check train_imagenet restart_probe dtrun_cuda_tests)
kit_setup() {
  local debs=${KIT_DEBS:-.gpu-kit/debs}
  KIT_PREFIX=$(realpath -m "${KIT_PREFIX:-.gpu-kit/prefix}")
  ls "$debs"/*.deb >/dev/null 2>&1 || {
    echo "gpu-kit: no .debs in $debs: run scripts/gpu-kit-fetch.sh on a machine with apt first" >&2
    return 1
  }
  local stamp="$KIT_PREFIX/.unpacked"
  if [ ! -f "$stamp" ] || [ -n "$(find "$debs" -name '*.deb' -newer "$stamp" | head -1)" ]; then
    rm -rf "$KIT_PREFIX" && mkdir -p "$KIT_PREFIX"
    local d
    for d in "$debs"/*.deb; do dpkg-deb -x "$d" "$KIT_PREFIX" || return 1; done
    # pkg-config files name /usr (prefix=, exec_prefix=, libdir=...): point them into the prefix.
    find "$KIT_PREFIX/usr" -name '*.pc' -exec sed -E -i "s#^([A-Za-z_]+)=/usr(/|\$)#\1=$KIT_PREFIX/usr\2#" {} +
    touch "$stamp"
  fi
  local lib="$KIT_PREFIX/usr/lib/x86_64-linux-gnu"
  export PATH="$KIT_PREFIX/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Only the prefix's pkg-config files: a package missing from the kit fails here, not later.
  export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$KIT_PREFIX/usr/share/pkgconfig"
  # The multiarch headers (libjpeg-turbo's jconfig.h, which jpeglib.h includes) are in no
  # pkg-config file's Cflags: the compiler finds the system's copy there unless told of the kit's.
  local arch_include="$KIT_PREFIX/usr/include/x86_64-linux-gnu"
  KIT_CMAKE_ARGS=(-DCMAKE_PREFIX_PATH="$KIT_PREFIX/usr${KIT_EXTRA_PREFIX:+;$KIT_EXTRA_PREFIX}"
                  -DCMAKE_INCLUDE_PATH="$KIT_PREFIX/usr/include" -DCMAKE_LIBRARY_PATH="$lib"
                  -DCMAKE_C_FLAGS="-isystem $arch_include" -DCMAKE_CXX_FLAGS="-isystem $arch_include"
                  -DCMAKE_BUILD_RPATH="$lib"
                  # DT_RPATH, not RUNPATH: it also finds the kit's libraries' own dependencies
                  # (libabsl_* behind libgrpc++), so programs run without LD_LIBRARY_PATH.
                  -DCMAKE_EXE_LINKER_FLAGS="-Wl,--disable-new-dtags")
}
