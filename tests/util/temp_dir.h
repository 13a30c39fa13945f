// A fresh directory for one test, removed with everything in it when the TempDir goes.
//
// The name is /tmp/rnl-<tag>-XXXXXX: short, so Unix socket paths a test puts under it stay
// well inside sun_path's 108 bytes. A test that creates the directory in SetUp and removes it
// in TearDown holds a std::optional<TempDir> and emplaces and resets it there.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace runnel::testing {

class TempDir {
 public:
  // Creates the directory. A failing mkdtemp throws std::system_error, which GoogleTest reports
  // as a failure of the test (a test must not go on with no directory). When `keep_env` names
  // an environment variable that is set when the TempDir goes, the directory is kept and its
  // path printed, for a look after a failure.
  explicit TempDir(std::string_view tag, const char* keep_env = nullptr) : keep_env_(keep_env) {
    std::string name = "/tmp/rnl-";
    name.append(tag);
    name.append("-XXXXXX");
    if (::mkdtemp(name.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + name);
    }
    path_ = std::move(name);
  }

  ~TempDir() {
    if (keep_env_ != nullptr && std::getenv(keep_env_) != nullptr) {
      std::printf("kept %s\n", path_.c_str());
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const char* keep_env_;
};

}  // namespace runnel::testing
