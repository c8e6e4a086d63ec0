// libFuzzer: the host lists dtrun reads from outside. Slurm's hostlist grammar (SLURM_JOB_NODELIST
// comes from the environment), and the hosts of `dtrun -H` / `--hostfile` (a file another tool
// wrote) with the control lines of a dtrun started by it. Any bytes: nothing crashes or throws,
// counts stay within their bounds, and no host that is accepted could reach ssh as an option or a
// shell as anything but a name (IPv6 addresses in brackets included).
#include <cstddef>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "launcher/control_stdin.h"
#include "launcher/host_list.h"
#include "launcher/slurm_hostlist.h"

namespace {

void CheckHosts(const absl::StatusOr<std::vector<dtrun::HostSlots>>& hosts) {
  if (!hosts.ok()) return;
  if (hosts->empty() || hosts->size() > static_cast<size_t>(dtrun::kMaxHosts)) __builtin_trap();
  for (const dtrun::HostSlots& h : *hosts) {
    if (h.name.empty() || h.name[0] == '-' || h.address().empty() || h.slots < 0 || h.slots > 64) __builtin_trap();
    for (char c : h.name) {  // ':' and '%' only in IPv6 addresses (and zones): no shell reads them
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_' && c != '@' &&
          c != ':' && c != '%') {
        __builtin_trap();
      }
    }
    // As the user would write it again, it means the same host.
    absl::StatusOr<std::vector<dtrun::HostSlots>> again = dtrun::ParseHostList(h.spec(), 64);
    if (!again.ok() || again->size() != 1 || (*again)[0].name != h.name || (*again)[0].slots != h.slots) {
      __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<std::string>> hosts = dtrun::ExpandHostlist(text, 4096);
  if (hosts.ok()) {
    if (hosts->size() > 4096) __builtin_trap();
    for (const std::string& h : *hosts) {
      if (h.empty()) __builtin_trap();
    }
  }
  CheckHosts(dtrun::ParseHostList(text, 64));
  CheckHosts(dtrun::ParseHostfile(text, "fuzz", 64));
  dtrun::ControlLine c = dtrun::ParseControlLine(text.substr(0, dtrun::kMaxControlLine));
  if (c.kind == dtrun::ControlLine::Kind::kSignal && c.signal <= 0) __builtin_trap();
  if (c.kind == dtrun::ControlLine::Kind::kInput && (c.input.empty() || c.input.size() > dtrun::kMaxInputChunk)) {
    __builtin_trap();
  }
  // Any chunk of bytes travels as one line and comes back whole.
  const std::string chunk(text.substr(0, dtrun::kMaxInputChunk));
  if (!chunk.empty()) {
    const std::string line = dtrun::InputLine(chunk);
    if (line.size() > dtrun::kMaxControlLine || line.find('\n') != line.size() - 1) __builtin_trap();
    dtrun::ControlLine back = dtrun::ParseControlLine(absl::string_view(line).substr(0, line.size() - 1));
    if (back.kind != dtrun::ControlLine::Kind::kInput || back.input != chunk) __builtin_trap();
  }
  return 0;
}
