#include "storaged/fault_file.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "common/log/log.h"

namespace runnel::storaged {
namespace {

const log::ModuleLogger kLog("storaged.faults");
constexpr std::chrono::milliseconds kLookEvery{50};

std::optional<FileOp> OpNamed(std::string_view name) {
  if (name == "write") return FileOp::kWrite;
  if (name == "sync") return FileOp::kSync;
  if (name == "truncate") return FileOp::kTruncate;
  if (name == "create") return FileOp::kCreate;
  if (name == "rename") return FileOp::kRename;
  return std::nullopt;
}

int ErrnoNamed(std::string_view name) {
  if (name == "EIO") return EIO;
  if (name == "ENOSPC") return ENOSPC;
  if (name == "EDQUOT") return EDQUOT;
  if (name == "EROFS") return EROFS;
  return 0;
}

}  // namespace

void FaultFile::ReloadIfChanged() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_look_) return;
  next_look_ = now + kLookEvery;
  std::string text;
  if (std::ifstream in(path_); in) {
    std::ostringstream all;
    all << in.rdbuf();
    text = all.str();
  }
  if (text == text_) return;
  text_ = text;
  rules_.clear();
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string op_name, errno_name, part;
    if (!(words >> op_name)) continue;  // a blank line
    words >> errno_name >> part;
    std::optional<FileOp> op = OpNamed(op_name);
    const int error = ErrnoNamed(errno_name);
    if (!op || error == 0 || part.empty()) {
      kLog()->warn("{}: cannot read the rule '{}'", path_, line);
      continue;
    }
    rules_.push_back(Rule{*op, error, part});
  }
  kLog()->warn("{}: {} file fault rule(s) in force", path_, rules_.size());
}

FileFault FaultFile::Check(FileOp op, std::string_view path) {
  MutexLock lock(&mu_);
  ReloadIfChanged();
  for (const Rule& r : rules_) {
    if (r.op == op && path.find(r.path_part) != std::string_view::npos) {
      return FileFault{.error = r.error};
    }
  }
  return {};
}

FaultFile* FaultFile::InstallFromEnvironment() {
  const char* path = std::getenv("RUNNEL_TEST_FAULTS_FILE");
  if (path == nullptr || *path == '\0') return nullptr;
  auto* faults = new FaultFile(path);  // NOLINT(cppcoreguidelines-owning-memory): see the header
  SetFileFaults(faults);
  kLog()->warn("test hook: file faults are read from {} (RUNNEL_TEST_FAULTS_FILE)", path);
  return faults;
}

}  // namespace runnel::storaged
