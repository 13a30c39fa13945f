// Whole reads and writes at a position: pread/pwrite retried until every byte is done
// (segment files and index files both go through these).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/util/status.h"

namespace runnel::storaged {

// Reads exactly `n` bytes at `pos`; a short read (end of file) is DataLoss. `path`, when
// given, names the file in the message ("read PATH: ...", "PATH: unexpected end of file").
Status PreadFull(int fd, uint8_t* buf, size_t n, int64_t pos, std::string_view path = "");
// Writes exactly `n` bytes at `pos`.
Status PwriteFull(int fd, const uint8_t* buf, size_t n, int64_t pos, std::string_view path = "");

}  // namespace runnel::storaged
