// Which BLAS does this process's matrix products (LibTorch's Linear layers on the CPU), and a
// warning when it is netlib's reference BLAS. Debian's libtorch only recommends an optimised one
// (OpenBLAS, BLIS, MKL): installed with --no-install-recommends, as container images do, it gets
// the reference library, and train_recsys's MLP steps ~3x slower (docs/BENCHMARKS.md). No LibTorch.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace dtrun::worker {

// Whether the library at `path` that defines sgemm_ is a reference BLAS: named libblas.so* (as
// every BLAS installed through Debian's alternatives is) and exporting none of the symbols by
// which OpenBLAS, BLIS, MKL and FlexiBLAS identify themselves (`exports`, asked per symbol).
bool IsReferenceBlas(std::string_view path, const std::function<bool(const char*)>& exports);

// One line naming the library and the fix when this process's sgemm_ comes from a reference BLAS;
// empty when it is an optimised one or none is loaded dynamically (pip's wheels link their own).
std::string SlowBlasWarning();

}  // namespace dtrun::worker
