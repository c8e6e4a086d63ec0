#include "worker/resnet.h"

#include <set>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun::worker {
namespace {

// "name shape" lines for every parameter and buffer, sorted.
std::set<std::string> OurStateDict(const std::string& arch) {
  ResNetOptions o;
  o.arch = arch;
  ResNet net(o);
  std::set<std::string> out;
  auto add = [&](const std::string& name, const torch::Tensor& t) {
    std::ostringstream s;
    s << name;
    for (int64_t d : t.sizes()) s << " " << d;
    out.insert(s.str());
  };
  for (auto& p : net->named_parameters()) add(p.key(), p.value());
  for (auto& b : net->named_buffers()) add(b.key(), b.value());
  return out;
}

TEST(ResNetTest, ParameterNamesAndShapesMatchTorchvision) {
  std::optional<std::string> py = dtrun::testing::TorchPython();
  if (!py) GTEST_SKIP() << "python3-torchvision not available to compare with";
  for (const char* arch : {"resnet18", "resnet50"}) {
    auto [rc, out] = dtrun::testing::RunToEnd(
        {*py, "-c",
         "import sys, torchvision\n"
         "m = getattr(torchvision.models, sys.argv[1])()\n"
         "for k, v in m.state_dict().items(): print(k, *v.shape)\n",
         arch});
    ASSERT_EQ(rc, 0) << out;
    std::set<std::string> theirs;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      while (!line.empty() && line.back() == ' ') line.pop_back();
      theirs.insert(line);
    }
    EXPECT_EQ(OurStateDict(arch), theirs) << arch;
  }
}

TEST(ResNetTest, ForwardGivesOneLogitPerClass) {
  ResNetOptions o;
  o.num_classes = 7;
  o.zero_init_residual = true;
  ResNet net(o);
  EXPECT_EQ(net->forward(torch::randn({2, 3, 64, 64})).sizes(), (std::vector<int64_t>{2, 7}));
  EXPECT_FALSE(IsKnownArch("resnet7"));
}

}  // namespace
}  // namespace dtrun::worker
