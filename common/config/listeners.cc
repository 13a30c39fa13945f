#include "common/config/listeners.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <set>

#include "common/config/config.h"

namespace runnel::config {

StatusOr<std::vector<Listener>> ParseListeners(std::string_view value) {
  std::vector<Listener> out;
  std::set<std::string> names;
  for (const std::string& item : SplitList(value)) {
    size_t scheme = item.find("://");
    if (scheme == std::string::npos || scheme == 0) {
      return absl::InvalidArgumentError(fmt::format("'{}' is not NAME://host:port", item));
    }
    Listener l;
    l.name = item.substr(0, scheme);
    std::string_view rest = std::string_view(item).substr(scheme + 3);
    size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) {
      return absl::InvalidArgumentError(fmt::format("'{}' has no port", item));
    }
    std::string_view host = rest.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    l.host = std::string(host);
    std::string_view port = rest.substr(colon + 1);
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), l.port);
    if (ec != std::errc() || ptr != port.data() + port.size() || l.port < 0 || l.port > 65535) {
      return absl::InvalidArgumentError(fmt::format("'{}' has a bad port", item));
    }
    if (l.name != "PLAINTEXT") {
      return absl::InvalidArgumentError(
          fmt::format("listener '{}': only PLAINTEXT listeners are supported so far", l.name));
    }
    if (!names.insert(l.name).second) {
      return absl::InvalidArgumentError(fmt::format("listener name '{}' repeats", l.name));
    }
    out.push_back(std::move(l));
  }
  return out;
}

StatusOr<HttpListener> ParseHttpListener(std::string_view value) {
  constexpr std::string_view kScheme = "http://";
  if (value.substr(0, kScheme.size()) != kScheme) {
    return absl::InvalidArgumentError("must be http://host:port (https is not served)");
  }
  std::string_view rest = value.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) return absl::InvalidArgumentError("needs a port");
  HttpListener out;
  std::string_view host = rest.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return absl::InvalidArgumentError("an IPv6 host goes in brackets: http://[::1]:9644");
  }
  if (host.find('/') != std::string_view::npos) {
    return absl::InvalidArgumentError("must be http://host:port, without a path");
  }
  out.host = std::string(host);
  std::string_view port = rest.substr(colon + 1);
  int p = 0;
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return absl::InvalidArgumentError("port must be a number from 1 to 65535");
  }
  for (char c : port) p = p * 10 + (c - '0');
  if (p < 1 || p > 65535) return absl::InvalidArgumentError("port must be from 1 to 65535");
  out.port = p;
  return out;
}

}  // namespace runnel::config
