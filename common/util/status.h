// Errors are values: every fallible function returns absl::Status or absl::StatusOr<T>.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <fmt/format.h>
#include <grpcpp/support/status.h>

#include <string_view>

namespace runnel {

using absl::Status;
using absl::StatusOr;

// absl and gRPC share the canonical code numbering, so the conversion is a cast.
inline grpc::Status ToGrpc(const Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}
inline Status FromGrpc(const grpc::Status& s) {
  return Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace runnel

#if !defined(ABSL_USES_STD_STRING_VIEW)
// Debian's Abseil has its own string_view (what Status::message() returns); let fmt print it
// like std::string_view.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<std::string_view> {
  template <typename Context>
  auto format(absl::string_view s, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(s.data(), s.size()), ctx);
  }
};
#endif

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define RUNNEL_RETURN_IF_ERROR(expr) \
  do {                               \
    ::absl::Status _st = (expr);     \
    if (!_st.ok()) return _st;       \
  } while (0)

#define RUNNEL_CONCAT_INNER(a, b) a##b
#define RUNNEL_CONCAT(a, b) RUNNEL_CONCAT_INNER(a, b)
// `tmp` is a name and `lhs` may be a declaration (`auto x`): neither takes parentheses.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define RUNNEL_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(*tmp)
// NOLINTEND(bugprone-macro-parentheses)
// `RUNNEL_ASSIGN_OR_RETURN(auto x, F());` binds x to F()'s value or returns its status.
#define RUNNEL_ASSIGN_OR_RETURN(lhs, expr) \
  RUNNEL_ASSIGN_OR_RETURN_IMPL(RUNNEL_CONCAT(_statusor_, __LINE__), lhs, expr)
