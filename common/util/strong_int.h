// Strong integer types for ids: a NodeId is not a ProducerId is not an int.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>

namespace runnel {

// An integer wrapper that converts to and from its underlying type only explicitly.
template <typename Tag, typename T>
class StrongInt {
 public:
  using ValueType = T;
  constexpr StrongInt() = default;
  constexpr explicit StrongInt(T v) : value_(v) {}
  constexpr T value() const { return value_; }
  constexpr auto operator<=>(const StrongInt&) const = default;
  constexpr bool operator==(const StrongInt&) const = default;
  friend std::ostream& operator<<(std::ostream& os, StrongInt v) { return os << +v.value_; }

 private:
  T value_{};
};

// The ids the codec types (common/protocol/codegen/model.py's STRONG_IDS). A new one is
// declared with its first use, not ahead of it.
using NodeId = StrongInt<struct NodeIdTag, int32_t>;
using ProducerId = StrongInt<struct ProducerIdTag, int64_t>;

}  // namespace runnel

template <typename Tag, typename T>
struct std::hash<runnel::StrongInt<Tag, T>> {
  size_t operator()(runnel::StrongInt<Tag, T> v) const noexcept {
    return std::hash<T>()(v.value());
  }
};
