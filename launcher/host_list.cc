#include "launcher/host_list.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dtrun {
namespace {

// A name ssh cannot read as an option or a second argument, and a shell cannot expand: letters,
// digits, '.', '-', '_' (USER@ before it), not starting with '-'.
bool IsHostName(absl::string_view name) {
  if (name.empty() || name.size() > 255 || name.front() == '-' || name.front() == '@') return false;
  int ats = 0;
  for (char c : name) {
    if (c == '@') {
      ++ats;
      continue;
    }
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') return false;
  }
  return ats <= 1 && name.back() != '@';
}

absl::StatusOr<int> ParseSlots(absl::string_view text, int max_slots) {
  int slots = 0;
  if (!absl::SimpleAtoi(text, &slots) || slots < 1 || slots > max_slots) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a worker count 1..", max_slots));
  }
  return slots;
}

// An IPv6 address as ssh and connect() take it, in its canonical form (so "[0::1]" and "[::1]" are
// one host): what inet_pton reads, with an optional zone ("fe80::1%eth0") of a host name's letters.
// Nothing a shell or ssh would read as more. nullopt if `text` is no such address.
std::optional<std::string> CanonicalIpv6(absl::string_view text) {
  const size_t percent = text.find('%');
  const absl::string_view zone = percent == absl::string_view::npos ? "" : text.substr(percent);
  if (!zone.empty() && (!IsHostName(zone.substr(1)) || absl::StrContains(zone, '@'))) return std::nullopt;
  const std::string address(text.substr(0, percent));
  // inet_pton reads a C string: an embedded NUL would end it early and let what follows through.
  for (char c : address) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return std::nullopt;
  }
  in6_addr parsed{};
  char canonical[INET6_ADDRSTRLEN];
  if (address.size() >= INET6_ADDRSTRLEN || ::inet_pton(AF_INET6, address.c_str(), &parsed) != 1 ||
      !::inet_ntop(AF_INET6, &parsed, canonical, sizeof(canonical))) {
    return std::nullopt;
  }
  return absl::StrCat(canonical, zone);
}

// "HOST", "HOST:N", "[IPV6]" or "[IPV6]:N", each with an optional USER@.
absl::StatusOr<HostSlots> ParseEntry(absl::string_view entry, int max_slots) {
  HostSlots h;
  absl::string_view host = entry;
  // ":N" follows the last ':', unless that is inside an IPv6 address's brackets.
  const size_t colon = entry.rfind(':'), close = entry.rfind(']');
  if (colon != absl::string_view::npos && (close == absl::string_view::npos || colon > close)) {
    host = entry.substr(0, colon);
    absl::StatusOr<int> slots = ParseSlots(entry.substr(colon + 1), max_slots);
    if (!slots.ok()) return slots.status();
    h.slots = *slots;
  }
  const size_t at = host.find('@');
  const absl::string_view user = at == absl::string_view::npos ? "" : host.substr(0, at + 1);
  absl::string_view address = host.substr(user.size());
  if (absl::ConsumePrefix(&address, "[")) {
    std::optional<std::string> canonical;
    if (absl::ConsumeSuffix(&address, "]")) canonical = CanonicalIpv6(address);
    if (!canonical) {
      return absl::InvalidArgumentError(absl::StrCat("'", host, "' is not an IPv6 address in brackets ([fd00::2])"));
    }
    if (!user.empty() && !IsHostName(user.substr(0, user.size() - 1))) {
      return absl::InvalidArgumentError(absl::StrCat("'", user, "' is not a user name"));
    }
    h.name = absl::StrCat(user, *canonical);  // as ssh takes it: no brackets
    return h;
  }
  if (!IsHostName(host)) {
    return absl::InvalidArgumentError(absl::StrCat("'", host,
                                                   "' is not a host name (letters, digits, '.', '-', '_', an "
                                                   "optional USER@) or an IPv6 address in brackets"));
  }
  h.name = std::string(host);
  return h;
}

absl::Status CheckList(const std::vector<HostSlots>& hosts, const std::string& what) {
  if (hosts.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " names no host; list at least one"));
  if (hosts.size() > static_cast<size_t>(kMaxHosts)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " names ", hosts.size(), " hosts; at most ", kMaxHosts));
  }
  std::set<std::string> seen;
  for (const HostSlots& h : hosts) {
    if (!seen.insert(h.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " names ", h.name, " twice; give each host once, with its worker count (HOST:N)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string HostSlots::address() const {
  size_t at = name.find('@');
  return at == std::string::npos ? name : name.substr(at + 1);
}

std::string HostSlots::endpoint_host() const {
  const std::string a = address();
  return a.find(':') == std::string::npos ? a : absl::StrCat("[", a, "]");
}

std::string HostSlots::spec() const {
  const size_t at = name.find('@');
  const std::string host = absl::StrCat(at == std::string::npos ? "" : name.substr(0, at + 1), endpoint_host());
  return slots > 0 ? absl::StrCat(host, ":", slots) : host;
}

absl::StatusOr<std::vector<HostSlots>> ParseHostList(absl::string_view value, int max_slots) {
  std::vector<HostSlots> hosts;
  for (absl::string_view entry : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    if (hosts.size() > static_cast<size_t>(kMaxHosts)) break;  // CheckList says so
    absl::StatusOr<HostSlots> h = ParseEntry(absl::StripAsciiWhitespace(entry), max_slots);
    if (!h.ok()) return absl::InvalidArgumentError(absl::StrCat("-H: ", h.status().message(), "; write HOST:N,HOST:N"));
    hosts.push_back(*std::move(h));
  }
  if (absl::Status s = CheckList(hosts, "-H"); !s.ok()) return s;
  return hosts;
}

absl::StatusOr<std::vector<HostSlots>> ParseHostfile(absl::string_view text, const std::string& path, int max_slots) {
  std::vector<HostSlots> hosts;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    if (hosts.size() > static_cast<size_t>(kMaxHosts)) break;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("--hostfile ", path, " line ", number, ": ", why,
                                                     "; write HOST slots=N (or HOST:N) on each line"));
    };
    std::vector<absl::string_view> words = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    absl::StatusOr<HostSlots> h = ParseEntry(words[0], max_slots);
    if (!h.ok()) return bad(h.status().message());
    for (size_t i = 1; i < words.size(); ++i) {
      absl::string_view v = words[i];
      if (absl::ConsumePrefix(&v, "slots=")) {
        absl::StatusOr<int> slots = ParseSlots(v, max_slots);
        if (!slots.ok()) return bad(slots.status().message());
        h->slots = *slots;
      } else if (!absl::StartsWith(v, "max_slots=")) {  // mpirun's cap: the slots are what is used
        return bad(absl::StrCat("'", v, "' is not slots=N"));
      }
    }
    hosts.push_back(*std::move(h));
  }
  if (absl::Status s = CheckList(hosts, "--hostfile " + path); !s.ok()) return s;
  return hosts;
}

}  // namespace dtrun
