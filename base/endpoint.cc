#include "base/endpoint.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dtrun {

absl::StatusOr<std::pair<std::string, int>> ParseEndpoint(const std::string& value, int default_port) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("endpoint '", value, "': ", why));
  };
  std::string host = value;
  std::string port_str;
  if (!value.empty() && value[0] == '[') {
    size_t close = value.find(']');
    if (close == std::string::npos) return bad("missing ']'");
    host = value.substr(1, close - 1);
    if (close + 1 < value.size() && value[close + 1] == ':') port_str = value.substr(close + 2);
  } else if (size_t colon = value.rfind(':'); colon != std::string::npos && value.find(':') == colon) {
    host = value.substr(0, colon);
    port_str = value.substr(colon + 1);
  }
  int port = default_port;
  if (!port_str.empty() && (!absl::SimpleAtoi(port_str, &port) || port < 0 || port > 65535)) {
    return bad(absl::StrCat("'", port_str, "' is not a port"));
  }
  if (host.empty()) return bad("missing host");
  return std::make_pair(host, port);
}

std::string FormatEndpoint(const std::string& host, int port) {
  return host.find(':') != std::string::npos ? absl::StrCat("[", host, "]:", port) : absl::StrCat(host, ":", port);
}

}  // namespace dtrun
