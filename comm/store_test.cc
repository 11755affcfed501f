// TcpStore and FileStore: set/get/check/add across clients, waiting, and timeouts naming the key.
#include "comm/store.h"

#include <gtest/gtest.h>

#include <thread>

#include "core/base/error.h"

namespace tessel::comm {
namespace {

using std::chrono::milliseconds;

std::vector<char> Bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

void ExerciseStore(Store& a, Store& b) {
  a.Set("alpha", Bytes("one"));
  EXPECT_TRUE(b.Check("alpha"));
  EXPECT_FALSE(b.Check("beta"));
  EXPECT_EQ(b.Get("alpha", milliseconds(100)), Bytes("one"));
  a.Set("empty", {});
  EXPECT_TRUE(b.Get("empty", milliseconds(100)).empty());
  // A Get issued before the Set waits for it.
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(50));
    a.Set("late/key", Bytes("there"));
  });
  EXPECT_EQ(b.Get("late/key", milliseconds(5000)), Bytes("there"));
  late.join();
  EXPECT_EQ(a.Add("counter", 2), 2);
  EXPECT_EQ(b.Add("counter", 3), 5);
  EXPECT_EQ(a.Get("counter", milliseconds(100)), Bytes("5"));  // decimal text, as PyTorch's stores keep it
  a.Set("set_counter", Bytes("-7"));
  EXPECT_EQ(b.Add("set_counter", 10), 3);  // a counter set by hand as text counts on
  try {
    b.Add("alpha", 1);  // "one" is no integer
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("alpha' holds"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.Get("alpha", milliseconds(100)), Bytes("one"));  // untouched
  try {
    b.Wait({"alpha", "never"}, milliseconds(50));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded);
    EXPECT_NE(std::string(e.what()).find("key(s) 'never' not set after 50 ms"), std::string::npos) << e.what();
  }
  // compare_set with PyTorch's semantics, delete_key and num_keys, seen from the other client.
  const int64_t keys = a.NumKeys();
  EXPECT_EQ(a.CompareSet("cas", Bytes("x"), Bytes("y")), Bytes("x"));  // absent, something expected: not set
  EXPECT_FALSE(b.Check("cas"));
  EXPECT_EQ(a.CompareSet("cas", {}, Bytes("first")), Bytes("first"));  // absent, nothing expected: set
  EXPECT_EQ(b.CompareSet("cas", Bytes("wrong"), Bytes("second")), Bytes("first"));  // another value: kept
  EXPECT_EQ(b.CompareSet("cas", Bytes("first"), Bytes("second")), Bytes("second"));
  EXPECT_EQ(a.Get("cas", milliseconds(100)), Bytes("second"));
  EXPECT_EQ(b.NumKeys(), keys + 1);
  EXPECT_TRUE(a.DeleteKey("cas"));
  EXPECT_FALSE(b.Check("cas"));
  EXPECT_FALSE(b.DeleteKey("cas"));
  EXPECT_EQ(a.NumKeys(), keys);
}

TEST(StoreTest, TcpStoreServesSetGetAddAcrossClients) {
  TcpStore server("127.0.0.1", 0, /*is_server=*/true, milliseconds(5000));
  ASSERT_GT(server.port(), 0);
  TcpStore client("127.0.0.1", server.port(), /*is_server=*/false, milliseconds(5000));
  ExerciseStore(server, client);
}

TEST(StoreTest, TcpStoreClientWaitsForALateServer) {
  // Reserve a free port, release it, and start the server after the client began connecting.
  int port;
  { port = TcpStore("127.0.0.1", 0, true, milliseconds(1000)).port(); }
  std::unique_ptr<TcpStore> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(milliseconds(100));
    server = std::make_unique<TcpStore>("127.0.0.1", port, true, milliseconds(5000));
    server->Set("ready", Bytes("1"));
  });
  TcpStore client("127.0.0.1", port, false, milliseconds(5000));
  EXPECT_EQ(client.Get("ready", milliseconds(5000)), Bytes("1"));
  starter.join();
}

TEST(StoreTest, TcpStoreClientWithoutServerTimesOutNamingTheAddress) {
  int port;
  { port = TcpStore("127.0.0.1", 0, true, milliseconds(1000)).port(); }
  try {
    TcpStore client("127.0.0.1", port, false, milliseconds(200));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded);
    EXPECT_NE(std::string(e.what()).find(Str("cannot connect to 127.0.0.1:", port)), std::string::npos) << e.what();
  }
}

TEST(StoreTest, FileStoreSharesKeysThroughADirectory) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/fs";
  FileStore a(dir), b(dir);
  ExerciseStore(a, b);
}

TEST(StoreTest, HashStoreSharesKeysBetweenThreads) {
  auto store = std::make_shared<HashStore>();
  ExerciseStore(*store, *store);
  EXPECT_EQ(store->NumKeys(), 5);  // alpha, empty, late/key, counter, set_counter
  try {
    store->Get("missing", milliseconds(20));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded);
    EXPECT_NE(std::string(e.what()).find("hash store: key(s) 'missing' not set after 20 ms"), std::string::npos);
  }
}

// Two prefixes over one store never see each other's keys; the inner store holds them as "<prefix>/<key>".
TEST(StoreTest, PrefixStoresKeepTheirKeysApartInOneStore) {
  auto inner = std::make_shared<HashStore>();
  PrefixStore a("job0", inner), b("job1", inner);
  ExerciseStore(a, a);
  EXPECT_FALSE(b.Check("alpha"));
  EXPECT_EQ(b.Add("counter", 1), 1);  // its own counter, not job0's 5
  EXPECT_EQ(inner->Get("job0/alpha", milliseconds(10)), Bytes("one"));
  EXPECT_NE(b.Describe().find("under prefix 'job1'"), std::string::npos);
}

}  // namespace
}  // namespace tessel::comm
