// Parsing of Kafka's `listeners` / `advertised.listeners` values.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/util/status.h"

namespace runnel::config {

// One entry of a `listeners` value: NAME://host:port.
struct Listener {
  std::string name;  // e.g. PLAINTEXT
  std::string host;  // "" means every address
  int port = 0;
  bool operator==(const Listener&) const = default;
};

// Parses a comma-separated listeners value. Names must be unique; only PLAINTEXT
// security is supported so far.
StatusOr<std::vector<Listener>> ParseListeners(std::string_view value);

// The node's HTTP port, `runnel.http.listener`: http://host:port, host an IPv4 address,
// a name, or [IPv6] (empty host: every address), port 1-65535.
struct HttpListener {
  std::string host;
  int port = 0;
};
StatusOr<HttpListener> ParseHttpListener(std::string_view value);

}  // namespace runnel::config
