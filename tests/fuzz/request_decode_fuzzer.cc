// libFuzzer target: arbitrary bytes as a request frame body (header + message, without the
// 4-byte size prefix). Decoding must never crash, and whatever decodes must survive
// encode -> decode -> encode unchanged, with Size() equal to the bytes written and
// CheckEncodable() accepting it. The same body is also decoded as that API's response, which
// doubles the message code covered at no cost. A decode that borrows records (views into the
// body, as brokerd reads Produce) must agree with the copying one.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "common/protocol/messages.h"

namespace runnel::protocol {
namespace {

[[noreturn]] void Fail(const char* what, const char* message, int16_t version) {
  std::fprintf(stderr, "%s v%d: %s\n", message, version, what);
  std::abort();
}

template <typename T>
void CheckRoundTrip(const T& m, int16_t version) {
  if (!m.CheckEncodable(version).ok()) Fail("decoded message is not encodable", T::kName, version);
  Bytes first;
  Writer w1(first);
  m.Encode(w1, version);
  if (first.size() != m.Size(version)) Fail("Size() differs from Encode()", T::kName, version);

  T again;
  Reader r(first);
  if (absl::Status s = again.Decode(r, version); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    Fail("re-encoded message does not decode", T::kName, version);
  }
  if (!r.empty()) Fail("re-decode left bytes", T::kName, version);
  // A message holding a NaN is unequal to itself; compare values only when that is not so.
  if (m == m && !(again == m)) Fail("re-decoded message differs", T::kName, version);

  Bytes second;
  Writer w2(second);
  again.Encode(w2, version);
  if (second != first) Fail("second encoding differs from the first", T::kName, version);
}

template <typename T>
void DecodeBody(std::span<const uint8_t> body, int16_t version) {
  T m;
  Reader r(body);
  if (!m.Decode(r, version).ok()) return;
  CheckRoundTrip(m, version);
}

}  // namespace
}  // namespace runnel::protocol

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace runnel::protocol;
  if (size < 4) return 0;
  const int16_t api_key = static_cast<int16_t>((data[0] << 8) | data[1]);
  const int16_t api_version = static_cast<int16_t>((data[2] << 8) | data[3]);
  const int16_t header_version = RequestHeaderVersion(api_key, api_version);

  Reader r(std::span<const uint8_t>(data, size));
  RequestHeader header;
  if (!header.Decode(r, header_version).ok()) return 0;
  {
    Bytes encoded;
    Writer w(encoded);
    header.Encode(w, header_version);
    if (encoded.size() != header.Size(header_version)) std::abort();
    RequestHeader again;
    Reader hr(encoded);
    if (!again.Decode(hr, header_version).ok() || !(again == header) || !hr.empty()) std::abort();
  }

  const std::span<const uint8_t> body = r.rest();
  // The generic entry point must agree with the typed one on success and length.
  Reader generic(body);
  const bool generic_ok = DecodeRequestBody(api_key, api_version, generic).ok();
  VisitRequestType(api_key, [&](auto type) {
    using T = typename decltype(type)::type;
    T m;
    Reader typed(body);
    const bool ok = m.Decode(typed, api_version).ok();
    if (ok != generic_ok || (ok && typed.position() != generic.position())) std::abort();
    if (ok) CheckRoundTrip(m, api_version);
    // Borrowing records (as brokerd decodes Produce) changes neither the outcome nor the value.
    T borrowed;
    Reader borrowing(body);
    borrowing.BorrowRecords();
    const bool borrowed_ok = borrowed.Decode(borrowing, api_version).ok();
    if (borrowed_ok != ok || (ok && borrowing.position() != typed.position())) std::abort();
    if (ok && m == m && !(borrowed == m)) std::abort();
    if (ok) CheckRoundTrip(borrowed, api_version);
  });
  VisitResponseType(
      api_key, [&](auto type) { DecodeBody<typename decltype(type)::type>(body, api_version); });
  return 0;
}
