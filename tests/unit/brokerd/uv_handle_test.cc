// UvHandle and its timer/async wrappers: a handle's memory is freed once, in its close
// callback, whenever its holder closes it (before the loop ever ran, from a callback, by
// being destroyed or moved over) and whether or not the holder outlives the close; and
// EventLoop's destructor runs the close callbacks of handles closed after the loop stopped.
// LiveUvHandles() counts the handles not yet freed; ASan and LSan catch a use after free, a
// double free or a leak.
#include "brokerd/net/uv_handle.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>

#include "brokerd/net/event_loop.h"

namespace runnel::brokerd {
namespace {

class UvHandleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(uv_loop_init(&loop_), 0);
    base_ = LiveUvHandles();
  }
  void TearDown() override {
    // Bounded: nothing may keep the loop alive once the test closed its handles.
    for (int i = 0; i < 16 && uv_loop_alive(&loop_) != 0; ++i) uv_run(&loop_, UV_RUN_NOWAIT);
    EXPECT_EQ(uv_loop_close(&loop_), 0) << "a handle is still open";
    EXPECT_EQ(LiveUvHandles(), base_);
  }
  // Runs the loop until it has nothing left to do; false when that takes over 100 passes.
  bool RunLoop() {
    for (int i = 0; i < 100; ++i) {
      if (uv_run(&loop_, UV_RUN_ONCE) == 0) return true;
    }
    return false;
  }

  uv_loop_t loop_;
  int64_t base_ = 0;
};

TEST_F(UvHandleTest, ClosedBeforeTheLoopRunsIsFreedInItsCloseCallback) {
  int fired = 0;
  bool closed = false;
  UvTimer timer(&loop_);
  ASSERT_TRUE(timer.open());
  timer.Start(0, 0, [&] { ++fired; });
  EXPECT_EQ(LiveUvHandles(), base_ + 1);
  EXPECT_TRUE(timer.Close([&] { closed = true; }));
  EXPECT_FALSE(timer.open());
  EXPECT_FALSE(timer.Close());  // nothing held: no second close
  EXPECT_EQ(LiveUvHandles(), base_ + 1) << "freed before its close callback";
  EXPECT_FALSE(closed);
  ASSERT_TRUE(RunLoop());
  EXPECT_TRUE(closed);
  EXPECT_EQ(fired, 0) << "a closed timer fired";
  EXPECT_EQ(LiveUvHandles(), base_);
}

TEST_F(UvHandleTest, ClosedAfterTheLoopRanAndFromItsOwnCallback) {
  int fired = 0;
  UvTimer timer(&loop_);
  timer.Start(1, 1, [&] {
    if (++fired == 3) timer.Close();
  });
  ASSERT_TRUE(RunLoop());  // returns once the repeating timer closed itself
  EXPECT_EQ(fired, 3);
  EXPECT_FALSE(timer.open());

  // Closed after the loop ran and returned.
  UvTimer idle(&loop_);
  idle.Start(0, 0, [&] { ++fired; });
  ASSERT_TRUE(RunLoop());
  EXPECT_EQ(fired, 4);
  EXPECT_EQ(LiveUvHandles(), base_ + 1);  // an inactive timer is still open
  idle.Close();
  ASSERT_TRUE(RunLoop());
  EXPECT_EQ(LiveUvHandles(), base_);
}

TEST_F(UvHandleTest, MovesTransferTheHandleAndAssignmentClosesTheOldOne) {
  int fired_a = 0;
  int fired_b = 0;
  UvTimer a(&loop_);
  a.Start(0, 0, [&] { ++fired_a; });
  UvTimer moved(std::move(a));
  EXPECT_FALSE(a.open());  // NOLINT(bugprone-use-after-move): the moved-from state is checked
  EXPECT_TRUE(moved.open());
  UvTimer b(&loop_);
  b.Start(0, 0, [&] { ++fired_b; });
  EXPECT_EQ(LiveUvHandles(), base_ + 2);
  b = std::move(moved);        // b's own timer is closed, a's lives on in b
  EXPECT_FALSE(moved.open());  // NOLINT(bugprone-use-after-move)
  ASSERT_TRUE(RunLoop());
  EXPECT_EQ(fired_a, 1);
  EXPECT_EQ(fired_b, 0);
  EXPECT_EQ(LiveUvHandles(), base_ + 1);
  UvHandle<uv_timer_t> raw;
  ASSERT_EQ(raw.Init([this](uv_timer_t* h) { return uv_timer_init(&loop_, h); }), 0);
  UvHandle<uv_timer_t> raw2 = std::move(raw);
  UvHandle<uv_timer_t>& same = raw2;  // an alias, so the compiler lets the self-move through
  raw2 = std::move(same);             // self-assignment keeps the handle
  EXPECT_TRUE(raw2);
  EXPECT_FALSE(raw);  // NOLINT(bugprone-use-after-move)
  // b and raw2 close in their destructors; TearDown runs the close callbacks.
}

TEST_F(UvHandleTest, TheHolderMayGoBeforeTheCloseCallback) {
  struct Holder {
    UvTimer timer;
    std::string name = std::string(100, 'h');  // heap memory ASan watches
  };
  auto holder = std::make_unique<Holder>();
  holder->timer.Init(&loop_);
  holder->timer.Start(0, 0, [] { ADD_FAILURE() << "a closed timer fired"; });
  bool closed = false;
  holder->timer.Close([&closed] { closed = true; });
  holder.reset();  // gone while its handle is closing

  // A holder destroyed without closing: its destructor closes.
  auto silent = std::make_unique<Holder>();
  silent->timer.Init(&loop_);
  silent->timer.Start(0, 0, [] { ADD_FAILURE() << "a timer fired after its holder went"; });
  silent.reset();

  // A callback that destroys its own holder (and with it the callback's captures' owner).
  auto self_destroying = std::make_unique<Holder>();
  self_destroying->timer.Init(&loop_);
  auto token = std::make_shared<std::string>(64, 't');
  bool ran = false;
  self_destroying->timer.Start(0, 0, [&self_destroying, token, &ran] {
    self_destroying.reset();
    ran = *token == std::string(64, 't');  // the running callback's captures are still alive
  });
  token.reset();
  ASSERT_TRUE(RunLoop());
  EXPECT_TRUE(closed);
  EXPECT_TRUE(ran);
  EXPECT_EQ(LiveUvHandles(), base_);
}

// The callback runs on a copy, so replacing it from inside (Start again) leaves the running
// one's captures alive until it returns.
TEST_F(UvHandleTest, ACallbackMayReplaceItselfWhileItRuns) {
  UvTimer timer(&loop_);
  auto token = std::make_shared<std::string>(64, 't');
  int second = 0;
  bool intact = false;
  timer.Start(0, 0, [&timer, &second, &intact, token] {
    timer.Start(0, 0, [&second] { ++second; });
    intact = *token == std::string(64, 't');
  });
  token.reset();  // the first callback holds the only reference
  ASSERT_TRUE(RunLoop());
  EXPECT_TRUE(intact);
  EXPECT_EQ(second, 1);
}

TEST_F(UvHandleTest, AFailedInitHoldsNothing) {
  UvHandle<uv_poll_t> poll;
  EXPECT_NE(poll.Init([this](uv_poll_t* h) { return uv_poll_init(&loop_, h, -1); }), 0);
  EXPECT_FALSE(poll);
  EXPECT_EQ(LiveUvHandles(), base_);
  EXPECT_FALSE(poll.Close());
}

// A pipe with a write still queued: libuv cancels the write before the close callback, and
// the write's callback may still use what the close callback frees (AppendStream's pattern).
TEST_F(UvHandleTest, CancelledWritesRunBeforeOnClosed) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  struct Conn {
    UvHandle<uv_pipe_t> pipe;
    std::string bytes = std::string(8 << 20, 'x');  // more than the socket buffer takes
    uv_write_t write;
    int write_status = 1;
  };
  auto conn = std::make_unique<Conn>();
  ASSERT_EQ(conn->pipe.Init([this](uv_pipe_t* h) { return uv_pipe_init(&loop_, h, 0); }), 0);
  ASSERT_EQ(uv_pipe_open(conn->pipe.get(), fds[0]), 0);
  conn->pipe.get()->data = conn.get();
  uv_buf_t buf = uv_buf_init(conn->bytes.data(), static_cast<unsigned>(conn->bytes.size()));
  ASSERT_EQ(uv_write(&conn->write, reinterpret_cast<uv_stream_t*>(conn->pipe.get()), &buf, 1,
                     [](uv_write_t* req, int status) {
                       static_cast<Conn*>(req->handle->data)->write_status = status;
                     }),
            0);
  int write_status_at_close = 1;
  Conn* raw = conn.get();
  raw->pipe.Close([owned = std::move(conn), &write_status_at_close] {
    write_status_at_close = owned->write_status;
  });
  ASSERT_TRUE(RunLoop());
  EXPECT_EQ(write_status_at_close, UV_ECANCELED);
  ::close(fds[1]);
  EXPECT_EQ(LiveUvHandles(), base_);
}

TEST(UvAsyncTest, SendFromAnotherThreadRunsTheCallbackOnTheLoop) {
  const int64_t base = LiveUvHandles();
  uv_loop_t loop;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  std::thread::id ran_on;
  UvAsync async;
  ASSERT_EQ(async.Init(&loop,
                       [&] {
                         ran_on = std::this_thread::get_id();
                         async.Close();
                       }),
            0);
  std::thread sender([&] { async.Send(); });
  EXPECT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);  // returns once the callback closed it
  sender.join();
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(uv_loop_close(&loop), 0);
  EXPECT_EQ(LiveUvHandles(), base);
}

// A holder that closes its handle after the loop stopped (as Broker's members do in their
// destructors): ~EventLoop runs the close callback, so nothing is left open or unfreed.
TEST(EventLoopTest, ItsDestructorFinishesTheClosesOfHandlesClosedAfterItStopped) {
  const int64_t base = LiveUvHandles();
  bool closed = false;
  {
    EventLoop loop;
    UvTimer timer(loop.raw());
    std::thread runner([&] { loop.Run(); });
    loop.Post([&] { timer.Start(60'000, 0, [] { ADD_FAILURE() << "fired"; }); });
    loop.Stop([&] { timer.Stop(); });  // stopped, not closed: Run() returns all the same
    runner.join();
    EXPECT_EQ(LiveUvHandles(), base + 1);
    timer.Close([&closed] { closed = true; });
  }
  EXPECT_TRUE(closed);
  EXPECT_EQ(LiveUvHandles(), base);
}

}  // namespace
}  // namespace runnel::brokerd
