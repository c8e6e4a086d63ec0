#include "worker/blas_check.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace dtrun::worker {
namespace {

std::function<bool(const char*)> Exporting(std::set<std::string> symbols) {
  return [symbols](const char* s) { return symbols.count(s) > 0; };
}

TEST(BlasCheckTest, NetlibsLibblasIsTheReferenceAndOpenBlasBehindTheSameNameIsNot) {
  EXPECT_TRUE(IsReferenceBlas("/usr/lib/x86_64-linux-gnu/libblas.so.3", Exporting({"sgemm_"})));
  EXPECT_TRUE(IsReferenceBlas("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0", Exporting({"sgemm_"})));
  EXPECT_FALSE(IsReferenceBlas("/usr/lib/x86_64-linux-gnu/libblas.so.3", Exporting({"sgemm_", "openblas_get_config"})));
  EXPECT_FALSE(IsReferenceBlas("/usr/lib/libblas.so.3", Exporting({"bli_info_get_version_str"})));
  EXPECT_FALSE(IsReferenceBlas("/opt/intel/libblas.so.3", Exporting({"mkl_get_version"})));
}

TEST(BlasCheckTest, ALibraryNotNamedLibblasIsNeverCalledTheReference) {
  // pip's libtorch_cpu.so carries its own BLAS; OpenBLAS loaded by its own name.
  EXPECT_FALSE(IsReferenceBlas("/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so", Exporting({})));
  EXPECT_FALSE(IsReferenceBlas("/usr/lib/libopenblas.so.0", Exporting({})));
}

TEST(BlasCheckTest, AProcessWithoutBlasIsNotWarned) {
  // This test binary links no BLAS, so no sgemm_ is loaded.
  EXPECT_EQ(SlowBlasWarning(), "");
}

}  // namespace
}  // namespace dtrun::worker
