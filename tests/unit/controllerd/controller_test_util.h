// Builds controllers over the Raft quorum for the controllerd tests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "controllerd/controller.h"
#include "controllerd/file_system.h"
#include "controllerd/quorum.h"
#include "controllerd/raft_log_store.h"

namespace runnel::controllerd::testing {

inline Deadline In(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

// A single-voter controller (this node alone, as with controller.quorum.voters empty) over a
// RaftLogStore in `dir`, ready to write: it elected itself, and the cluster id is committed.
inline std::unique_ptr<Controller> OpenSingleVoter(const ControllerOptions& options,
                                                   const std::string& dir,
                                                   FileSystem& fs = PosixFileSystem()) {
  auto store = RaftLogStore::Open(fs, dir);
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return nullptr;
  QuorumOptions q;
  q.id = options.node_id;
  q.seed = 1;
  auto c = Controller::Open(options, std::make_unique<Quorum>(q, std::move(*store), nullptr));
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return nullptr;
  Status ready = (*c)->quorum().WaitLeaderReady(In(std::chrono::seconds(10)));
  EXPECT_TRUE(ready.ok()) << ready;
  Status id = (*c)->WaitForClusterId(In(std::chrono::seconds(10)));
  EXPECT_TRUE(id.ok()) << id;
  return std::move(*c);
}

}  // namespace runnel::controllerd::testing
