//===- CacheTest.cpp - SHA-256, memory and disk caches, cross-process lock ===//
#include "DiskCache.h"
#include "Sha256.h"
#include "TestKernels.h"
#include "Util.h"
#include "kvgen/ReadFile.h"
#include "kvgen/kvgen.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#include <chrono>

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace kvgen;

namespace {

TEST(Sha256, KnownAnswers) {
  // FIPS 180-2, appendix B.1 ("abc") and the empty message (the runtime's
  // own SHA-256, Sha256.cpp; sha256_vs_hashlib.py compares it with Python's
  // hashlib on random messages).
  EXPECT_EQ(rt::toHex(rt::sha256("abc", 3)),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(rt::toHex(rt::sha256("", 0)),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // FIPS 180-2, appendix B.2, fed in pieces.
  rt::Sha256 h;
  h.update("abcdbcdecdefdefgefghfghighijhijk");
  h.update("ijkljklmklmnlmnomnopnopq");
  EXPECT_EQ(rt::toHex(h.finish()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // The 896-bit (two-block, padding in a third) message of NIST's example
  // set, and FIPS 180-2 appendix B.3: one million 'a', fed 1000 at a time.
  const std::string m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklm"
                           "ghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                           "mnopqrstnopqrstu";
  EXPECT_EQ(rt::toHex(rt::sha256(m896.data(), m896.size())),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  rt::Sha256 million;
  const std::string thousand(1000, 'a');
  for (int i = 0; i < 1000; ++i)
    million.update(thousand);
  EXPECT_EQ(rt::toHex(million.finish()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // NIST CAVP SHA256ShortMsg.rsp, Len = 8 and Len = 16.
  EXPECT_EQ(rt::toHex(rt::sha256("\xd3", 1)),
            "28969cdfa74a12c82f3bad960b0b000aca2ac329deea5c2328ebc6f2ba9802c1");
  EXPECT_EQ(rt::toHex(rt::sha256("\x11\xaf", 2)),
            "5ca7133fa735326081558ac312c620eeca9970d1e70a4b95533d956f072d1f98");
}

TEST(DiskCacheFormat, EncodeDecodeAndCorruption) {
  rt::Digest key = rt::sha256("key", 3), other = rt::sha256("other", 5);
  std::string payload = "\x7f"
                        "ELF payload bytes";
  std::string file = rt::DiskCache::encode(key, payload);
  ASSERT_EQ(file.size(), rt::DiskCache::kHeaderSize + payload.size());
  std::string out, why;
  ASSERT_TRUE(rt::DiskCache::decode(file, key, &out, &why)) << why;
  EXPECT_EQ(out, payload);
  EXPECT_FALSE(rt::DiskCache::decode(file, other, &out, &why));
  EXPECT_EQ(why, "key mismatch");
  EXPECT_FALSE(
      rt::DiskCache::decode(file.substr(0, file.size() - 1), key, &out, &why));
  EXPECT_NE(why.find("payload is"), std::string::npos) << why;
  EXPECT_FALSE(rt::DiskCache::decode(file.substr(0, 20), key, &out, &why));
  EXPECT_NE(why.find("truncated"), std::string::npos) << why;
  for (size_t at : {size_t(0), size_t(9), size_t(60), file.size() - 1}) {
    std::string flipped = file;
    flipped[at] ^= 0x10;
    EXPECT_FALSE(rt::DiskCache::decode(flipped, key, &out, &why))
        << "flip at " << at;
  }
}

// Runs `fn` in a child process with at most `seconds` of wall time (alarm)
// and 1 GiB of address space, and returns its exit status (3 for an
// exception), or 128 + the signal that ended it: a read that blocks or
// allocates what it was told comes back as a failure instead of hanging or
// exhausting the test.
int runBounded(int seconds, int (*fn)(const std::string &),
               const std::string &arg) {
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    struct rlimit as = {rlim_t(1) << 30, rlim_t(1) << 30};
    ::setrlimit(RLIMIT_AS, &as);
    ::alarm(unsigned(seconds));
    int rc = 3;
#if defined(__cpp_exceptions)
    // The child never returns into the test (std::bad_alloc included).
    try {
      rc = fn(arg);
    } catch (...) {
      rc = 3;
    }
#else
    rc = fn(arg);
#endif
    ::_exit(rc);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid)
    return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// In a child: reads the entry of key "k" of the cache in `dir`; exits 0
// when that is a miss, 1 for a hit, 2 for an invalid entry.
int readEntryOfK(const std::string &dir) {
  rt::DiskCache cache(dir, nullptr);
  std::string payload, why;
  rt::DiskCache::Read r = cache.read(rt::sha256("k", 1), &payload, &why);
  return r == rt::DiskCache::Read::Miss  ? 0
         : r == rt::DiskCache::Read::Hit ? 1
                                         : 2;
}

TEST(DiskCacheEntries, AFifoIsAMissWithoutBlocking) {
  // open() of a FIFO without a writer used to wait forever.
  test::TempDir tmp;
  rt::DiskCache cache(tmp.path(), nullptr);
  ASSERT_TRUE(cache.enabled());
  const std::string path = cache.entryPath(rt::sha256("k", 1));
  ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
  auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(runBounded(20, readEntryOfK, tmp.path()), 0);
  EXPECT_LT(rt::msSince(start), 5000.0);
  std::string payload, why;
  EXPECT_EQ(cache.read(rt::sha256("k", 1), &payload, &why),
            rt::DiskCache::Read::Miss);
  EXPECT_NE(why.find("it is a FIFO, not a regular file"), std::string::npos)
      << why;
  // The compile's write replaces it with a real entry.
  ASSERT_TRUE(cache.write(rt::sha256("k", 1), "payload"));
  EXPECT_EQ(cache.read(rt::sha256("k", 1), &payload, &why),
            rt::DiskCache::Read::Hit);
  EXPECT_EQ(payload, "payload");
}

TEST(DiskCacheEntries, AHugeSparseEntryIsAMissWithoutReadingIt) {
  // 6 GiB (sparse): read whole, it ended in std::bad_alloc. The child has
  // 1 GiB of address space, so reading it is a failure here.
  test::TempDir tmp;
  rt::DiskCache cache(tmp.path(), nullptr);
  ASSERT_TRUE(cache.enabled());
  const std::string path = cache.entryPath(rt::sha256("k", 1));
  ASSERT_EQ(::truncate(path.c_str(), off_t(6) << 30), -1); // no file yet
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t(6) << 30), 0);
  ::close(fd);
  auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(runBounded(20, readEntryOfK, tmp.path()), 0);
  EXPECT_LT(rt::msSince(start), 5000.0);
  std::string payload, why;
  EXPECT_EQ(cache.read(rt::sha256("k", 1), &payload, &why),
            rt::DiskCache::Read::Miss);
  EXPECT_NE(why.find("it holds 6442450944 bytes, more than the limit of " +
                     std::to_string(rt::DiskCache::kHeaderSize +
                                    rt::DiskCache::kMaxPayloadBytes)),
            std::string::npos)
      << why;
  // A directory where the entry would be: a miss as well.
  test::TempDir tmp2;
  rt::DiskCache cache2(tmp2.path(), nullptr);
  ASSERT_EQ(::mkdir(cache2.entryPath(rt::sha256("k", 1)).c_str(), 0755), 0);
  EXPECT_EQ(cache2.read(rt::sha256("k", 1), &payload, &why),
            rt::DiskCache::Read::Miss);
  EXPECT_NE(why.find("it is a directory"), std::string::npos) << why;
  // Writing that entry leaves the cache on: an empty directory is replaced
  // by the entry, a non-empty one (not kvgen's to delete) keeps this one
  // entry out; other entries are written as before. (The rename onto the
  // directory failed with EISDIR and turned the whole cache off.)
  EXPECT_TRUE(cache2.write(rt::sha256("k", 1), "payload"));
  EXPECT_TRUE(cache2.enabled());
  EXPECT_EQ(cache2.read(rt::sha256("k", 1), &payload, &why),
            rt::DiskCache::Read::Hit);
  const std::string full = cache2.entryPath(rt::sha256("j", 1));
  ASSERT_EQ(::mkdir(full.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((full + "/x").c_str(), 0755), 0);
  EXPECT_FALSE(cache2.write(rt::sha256("j", 1), "payload"));
  EXPECT_TRUE(cache2.enabled());
  EXPECT_TRUE(cache2.write(rt::sha256("i", 1), "other"));
  EXPECT_EQ(cache2.read(rt::sha256("i", 1), &payload, &why),
            rt::DiskCache::Read::Hit);
  EXPECT_EQ(payload, "other");
  // A FIFO where the entry goes is replaced by the entry.
  const std::string fifo = cache2.entryPath(rt::sha256("h", 1));
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_TRUE(cache2.write(rt::sha256("h", 1), "fifo-was-here"));
  EXPECT_TRUE(cache2.enabled());
}

// A bundle with one host reshape_and_cache kernel for the MiMo layout.
std::string makeHostBundle(const std::string &dir, const std::string &name,
                           const std::string &extraSource = "") {
  KernelSpec spec =
      KernelSpec::make(KernelOp::ReshapeAndCache, test::mimoLayout());
  KernelEntry e = test::testEntry(name, "host", spec, name + ".cpp");
  std::optional<std::string> err =
      writeBundle(dir, {{e, test::hostKernelSource(name, spec) + extraSource}});
  EXPECT_FALSE(err.has_value()) << *err;
  return dir;
}

kvgen_cache_stats statsOf(const Context &ctx) {
  kvgen_cache_stats s{};
  EXPECT_TRUE(ctx.stats(&s).ok());
  return s;
}

class HostCacheTest : public ::testing::Test {
public:
  void SetUp() override {
    bundle = makeHostBundle(tmp.path() + "/bundle", "kv_rc");
    cacheDir = tmp.path() + "/cache";
  }
  // A new context (empty memory cache) on `cacheDir` with the bundle.
  Context freshContext() {
    Context ctx;
    Status s = Context::create(KVGEN_BACKEND_HOST, 0, &ctx);
    EXPECT_TRUE(s.ok()) << s.message;
    EXPECT_TRUE(ctx.setCacheDir(cacheDir).ok());
    EXPECT_EQ(ctx.cacheDir(), cacheDir);
    Status b = ctx.loadBundle(bundle);
    EXPECT_TRUE(b.ok()) << b.message;
    return ctx;
  }
  std::string entryFile() {
    // The one entry in the cache directory.
    std::string out;
    std::string cmd = "ls " + cacheDir + "/*.kvbin";
    EXPECT_EQ(rt::runCommand(cmd, &out), 0) << out;
    while (!out.empty() && out.back() == '\n')
      out.pop_back();
    EXPECT_EQ(out.find('\n'), std::string::npos) << out;
    return out;
  }
  test::TempDir tmp;
  std::string bundle, cacheDir;
};

TEST_F(HostCacheTest, MemoryHitReturnsSameHandleWithoutCompiling) {
  Context ctx = freshContext();
  Kernel a, b;
  Status s = ctx.getKernel("kv_rc", &a);
  ASSERT_TRUE(s.ok()) << s.message;
  ASSERT_TRUE(ctx.getKernel("kv_rc", &b).ok());
  EXPECT_EQ(a.get(), b.get());
  kvgen_cache_stats st = statsOf(ctx);
  EXPECT_EQ(st.compiles, 1u);
  EXPECT_EQ(st.memory_hits, 1u);
  EXPECT_EQ(st.disk_writes, 1u);
  EXPECT_EQ(st.disk_hits, 0u);
  EXPECT_GT(st.last_compile_ms, 0.0);
  EXPECT_EQ(test::countFiles(cacheDir, ".kvbin"), 1);
  EXPECT_EQ(test::countFiles(cacheDir, ".tmp."), 0);
  // An unknown name is a clean NOT_FOUND.
  Kernel none;
  Status nf = ctx.getKernel("kv_nope", &none);
  EXPECT_EQ(nf.code, KVGEN_ERROR_NOT_FOUND);
  EXPECT_NE(nf.message.find("kv_nope"), std::string::npos) << nf.message;
}

TEST_F(HostCacheTest, SecondContextHitsDisk) {
  {
    Context c1 = freshContext();
    Kernel k;
    ASSERT_TRUE(c1.getKernel("kv_rc", &k).ok());
  }
  Context c2 = freshContext();
  Kernel k;
  ASSERT_TRUE(c2.getKernel("kv_rc", &k).ok());
  kvgen_cache_stats st = statsOf(c2);
  EXPECT_EQ(st.disk_hits, 1u);
  EXPECT_EQ(st.compiles, 0u);
  EXPECT_EQ(st.evictions, 0u);
}

void corruptAndExpectRebuild(HostCacheTest &t, const char *what,
                             void (*corrupt)(const std::string &path)) {
  SCOPED_TRACE(what);
  {
    Context c1 = t.freshContext();
    Kernel k;
    ASSERT_TRUE(c1.getKernel("kv_rc", &k).ok());
  }
  std::string path = t.entryFile();
  corrupt(path);
  Context c2 = t.freshContext();
  Kernel k;
  Status s = c2.getKernel("kv_rc", &k);
  ASSERT_TRUE(s.ok()) << s.message;
  kvgen_cache_stats st = statsOf(c2);
  EXPECT_EQ(st.evictions, 1u);
  EXPECT_EQ(st.compiles, 1u);
  EXPECT_EQ(st.disk_hits, 0u);
  EXPECT_EQ(st.disk_writes, 1u);
  // The rebuilt entry is valid again: a third context hits it.
  Context c3 = t.freshContext();
  ASSERT_TRUE(c3.getKernel("kv_rc", &k).ok());
  EXPECT_EQ(statsOf(c3).disk_hits, 1u);
  EXPECT_EQ(statsOf(c3).compiles, 0u);
}

TEST_F(HostCacheTest, TruncatedEntryIsEvictedAndRebuilt) {
  corruptAndExpectRebuild(*this, "truncate", [](const std::string &path) {
    std::string err;
    std::optional<std::string> data =
        readRegularFile(path, kMaxCacheEntryBytes, "the entry", &err);
    ASSERT_TRUE(data) << err;
    ASSERT_EQ(::truncate(path.c_str(), off_t(data->size() / 2)), 0);
  });
}

TEST_F(HostCacheTest, BitFlippedEntryIsEvictedAndRebuilt) {
  corruptAndExpectRebuild(*this, "bit flip", [](const std::string &path) {
    std::string err;
    std::optional<std::string> data =
        readRegularFile(path, kMaxCacheEntryBytes, "the entry", &err);
    ASSERT_TRUE(data) << err;
    (*data)[data->size() - 100] ^= 0x01; // inside the .so payload
    ASSERT_FALSE(rt::writeFileAtomic(path, data->data(), data->size()));
  });
}

TEST_F(HostCacheTest, UncreatableDirDegradesToMemoryWithOneWarning) {
  // Root can write anywhere, but nobody can make a directory below a
  // regular file (ENOTDIR).
  std::string file = tmp.path() + "/plain-file";
  ASSERT_FALSE(rt::writeFileAtomic(file, "x", 1));
  std::string bad = file + "/cache";
  makeHostBundle(tmp.path() + "/bundle2", "kv_rc2");

  Context ctx;
  ASSERT_TRUE(Context::create(KVGEN_BACKEND_HOST, 0, &ctx).ok());
  std::vector<std::string> warnings;
  ctx.setWarningCallback(
      [](const char *m, void *u) {
        static_cast<std::vector<std::string> *>(u)->push_back(m);
      },
      &warnings);
  ASSERT_TRUE(ctx.setCacheDir(bad).ok());
  EXPECT_EQ(ctx.cacheDir(), "");
  ASSERT_TRUE(ctx.loadBundle(bundle).ok());
  ASSERT_TRUE(ctx.loadBundle(tmp.path() + "/bundle2").ok());
  Kernel a, b;
  Status s = ctx.getKernel("kv_rc", &a);
  ASSERT_TRUE(s.ok()) << s.message;
  s = ctx.getKernel("kv_rc2", &b);
  ASSERT_TRUE(s.ok()) << s.message;
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(bad), std::string::npos) << warnings[0];
  EXPECT_EQ(warnings[0].rfind("kvgen: warning: disk cache", 0), 0u)
      << warnings[0];
  EXPECT_NE(warnings[0].find("memory only"), std::string::npos);
  kvgen_cache_stats st = statsOf(ctx);
  EXPECT_EQ(st.compiles, 2u);
  EXPECT_EQ(st.disk_writes, 0u);
}

// A context whose disk cache turns memory-only at its first write (as
// `spoil` makes it fail) reports "" as its cache directory from then on,
// as kvgen.h says; it used to keep naming the directory.
void expectMemoryOnlyAfterAFailedWrite(HostCacheTest &t,
                                       void (*spoil)(const std::string &dir),
                                       const std::string &expectedWhy) {
  Context ctx = t.freshContext();
  spoil(t.cacheDir);
  std::vector<std::string> warnings;
  ctx.setWarningCallback(
      [](const char *m, void *u) {
        static_cast<std::vector<std::string> *>(u)->push_back(m);
      },
      &warnings);
  EXPECT_EQ(ctx.cacheDir(), t.cacheDir);
  Kernel k;
  Status s = ctx.getKernel("kv_rc", &k);
  ASSERT_TRUE(s.ok()) << s.message;
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("caching in memory only"), std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[0].find(expectedWhy), std::string::npos) << warnings[0];
  EXPECT_EQ(statsOf(ctx).disk_writes, 0u);
  EXPECT_EQ(ctx.cacheDir(), "");
  EXPECT_EQ(std::string(kvgen_context_cache_dir(ctx.get())), "");
}

TEST_F(HostCacheTest, CacheDirIsEmptyOnceAWriteFailureTurnsItOff) {
  // The directory is replaced by a regular file after setCacheDir: the
  // entry's temporary file cannot be made (ENOTDIR), even as root.
  expectMemoryOnlyAfterAFailedWrite(
      *this,
      [](const std::string &dir) {
        ASSERT_EQ(::rmdir(dir.c_str()), 0);
        ASSERT_FALSE(rt::writeFileAtomic(dir, "x", 1));
      },
      "Not a directory");
}

TEST_F(HostCacheTest, CacheDirIsEmptyAfterENOSPC) {
  // A full file system: a tmpfs of one page, smaller than the entry (the
  // host .so). Needs the right to mount (root with CAP_SYS_ADMIN).
  ASSERT_EQ(::mkdir(cacheDir.c_str(), 0755), 0);
  if (::mount("tmpfs", cacheDir.c_str(), "tmpfs", 0, "size=4k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here: " << rt::errnoText(errno);
  struct Unmount {
    std::string dir;
    ~Unmount() { ::umount2(dir.c_str(), MNT_DETACH); }
  } unmount{cacheDir};
  expectMemoryOnlyAfterAFailedWrite(
      *this, [](const std::string &) {}, "No space left on device");
}

TEST_F(HostCacheTest, CreationWarningReachesACallbackSetAfterwards) {
  // The default directory ($KVGEN_CACHE_DIR) is unusable when the context
  // is created; the warning used to go to stderr before a callback could be
  // set.
  std::string file = tmp.path() + "/plain-file2";
  ASSERT_FALSE(rt::writeFileAtomic(file, "x", 1));
  std::string bad = file + "/cache";
  const char *old = std::getenv("KVGEN_CACHE_DIR");
  std::string saved = old ? old : "";
  ::setenv("KVGEN_CACHE_DIR", bad.c_str(), 1);
  Context ctx;
  Status s = Context::create(KVGEN_BACKEND_HOST, 0, &ctx);
  if (old)
    ::setenv("KVGEN_CACHE_DIR", saved.c_str(), 1);
  else
    ::unsetenv("KVGEN_CACHE_DIR");
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(ctx.cacheDir(), "");
  std::vector<std::string> warnings;
  ctx.setWarningCallback(
      [](const char *m, void *u) {
        static_cast<std::vector<std::string> *>(u)->push_back(m);
      },
      &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(bad), std::string::npos) << warnings[0];
}

TEST_F(HostCacheTest, EightProcessesOnAColdKeyCompileOnce) {
  constexpr int kProcs = 8;
  // A source that takes ~2 s to compile, so that all eight processes are
  // inside the cold path at once: without the per-key lock several compile.
  std::string slowBundle = makeHostBundle(
      tmp.path() + "/slow", "kv_slow",
      "#include <regex>\n#include <string>\n"
      "bool kv_slow_match(const std::string &s) {\n"
      "  return std::regex_match(s, std::regex(\"a+b*\"));\n}\n");
  int gate[2];
  ASSERT_EQ(::pipe(gate), 0);
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcs; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(gate[1]);
      char c;
      // Wait until the parent opens the gate (closes its end: EOF).
      while (::read(gate[0], &c, 1) > 0) {
      }
      kvgen_context ctx = nullptr;
      int code = 0;
      if (kvgen_context_create(KVGEN_BACKEND_HOST, 0, &ctx) != KVGEN_SUCCESS ||
          kvgen_context_set_cache_dir(ctx, cacheDir.c_str()) != KVGEN_SUCCESS ||
          kvgen_context_load_bundle(ctx, slowBundle.c_str()) != KVGEN_SUCCESS) {
        ::_exit(100);
      }
      kvgen_kernel k = nullptr;
      if (kvgen_context_get_kernel(ctx, "kv_slow", &k) != KVGEN_SUCCESS)
        code = 101;
      kvgen_cache_stats st{};
      kvgen_context_get_stats(ctx, &st);
      if (code == 0)
        code = int(st.compiles) + 10 * int(st.disk_hits);
      kvgen_context_destroy(ctx);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  ::close(gate[0]);
  ::close(gate[1]); // all children start now
  int compiles = 0, diskHits = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    int code = WEXITSTATUS(status);
    ASSERT_LT(code, 100) << "a child failed with " << code;
    compiles += code % 10;
    diskHits += code / 10;
  }
  EXPECT_EQ(compiles, 1);
  EXPECT_EQ(diskHits, kProcs - 1);
  EXPECT_EQ(test::countFiles(cacheDir, ".kvbin"), 1);
  EXPECT_EQ(test::countFiles(cacheDir, ".tmp."), 0);
  // Each holder removed its lock file before releasing it: no litter.
  EXPECT_EQ(test::countFiles(cacheDir, ".lock"), 0);
  // The one entry is valid.
  std::string err;
  std::optional<std::string> file =
      readRegularFile(entryFile(), kMaxCacheEntryBytes, "the entry", &err);
  ASSERT_TRUE(file) << err;
  std::string hex = entryFile().substr(entryFile().rfind('/') + 1, 64);
  rt::Digest key{};
  for (size_t i = 0; i < key.size(); ++i)
    key[i] = uint8_t(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  std::string payload, why;
  EXPECT_TRUE(rt::DiskCache::decode(*file, key, &payload, &why)) << why;
  EXPECT_EQ(payload.compare(0, 4,
                            "\x7f"
                            "ELF"),
            0);
}

} // namespace

// Second hostile review (issue 26): a lock file that is a symlink made
// open(O_CREAT) create the link's target outside the cache. The lock is
// opened with O_NOFOLLOW: nothing is created, the compile goes on unlocked.
TEST(DiskCacheEntries, ALockFileSymlinkCreatesNothingOutside) {
  test::TempDir tmp, outside;
  rt::DiskCache cache(tmp.path(), nullptr);
  ASSERT_TRUE(cache.enabled());
  const rt::Digest key = rt::sha256("lock", 4);
  const std::string target = outside.path() + "/created";
  ASSERT_EQ(::symlink(target.c_str(), cache.lockPath(key).c_str()), 0);
  bool timedOut = true;
  {
    rt::DiskCache::Lock l =
        cache.lock(key, std::chrono::milliseconds(100), &timedOut);
    (void)l;
  }
  EXPECT_FALSE(timedOut);
  struct stat st;
  EXPECT_NE(::lstat(target.c_str(), &st), 0) << "created outside the cache";
  EXPECT_TRUE(cache.enabled());
}
