// CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), the checksum of Kafka
// record batches and of Runnel's own on-disk frames.
//
// Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at run time) and a
// table-driven (slicing-by-8) implementation otherwise; both give the same values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace runnel::crc32c {

// Extends `crc` (the CRC32C of some earlier bytes, 0 for none) with `n` more bytes.
uint32_t Extend(uint32_t crc, const void* data, size_t n);

inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }
inline uint32_t Value(std::span<const std::byte> data) {
  return Extend(0, data.data(), data.size());
}
inline uint32_t Value(std::string_view data) { return Extend(0, data.data(), data.size()); }

// The table-driven implementation, always available (tests compare it with Extend).
uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n);

// Whether Extend uses the SSE4.2 instruction on this CPU.
bool HardwareAccelerated();

}  // namespace runnel::crc32c
