//===- Util.cpp - Files, processes and dlopen helpers ---------------------===//
#include "Util.h"
#include "kvgen/ReadFile.h"
#include "kvgen/TextBounds.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace kvgen {
namespace rt {

std::string errnoText(int err) {
  char buf[256];
  // GNU strerror_r returns a char*; XSI returns int. Handle both.
  auto r = strerror_r(err, buf, sizeof(buf));
  if constexpr (std::is_same_v<decltype(r), char *>)
    return std::string(r);
  else
    return std::string(buf);
}

} // namespace rt

namespace {
/// What a non-regular file is, for messages.
const char *fileTypeName(mode_t mode) {
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a plain file";
}
} // namespace

std::optional<std::string> readStandardInput(uint64_t maxBytes,
                                             std::string *error) {
  std::string data;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(0, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (error)
        *error =
            fmt::format("cannot read standard input: {}", rt::errnoText(errno));
      return std::nullopt;
    }
    if (n == 0)
      return data;
    data.append(buf, size_t(n));
    if (data.size() > maxBytes) {
      if (error)
        *error = fmt::format("standard input holds more than the limit of "
                             "{} bytes",
                             maxBytes);
      return std::nullopt;
    }
  }
}

std::optional<std::string> readMlirInput(const std::string &path,
                                         std::string *error) {
  const bool fromStdin = path == "-";
  std::optional<std::string> text =
      fromStdin
          ? readStandardInput(kMaxMlirInputBytes, error)
          : readRegularFile(path, kMaxMlirInputBytes, "the input file", error);
  if (text && !checkMlirText(*text, fromStdin ? "<stdin>" : path, error))
    return std::nullopt;
  return text;
}

std::optional<std::string> readRegularFile(const std::string &path,
                                           uint64_t maxBytes,
                                           const std::string &what,
                                           std::string *error,
                                           ReadFileError *kind) {
  auto fail = [&](ReadFileError k, const std::string &why) {
    if (error)
      *error = fmt::format("cannot read {} '{}': {}", what, path, why);
    if (kind)
      *kind = k;
    return std::nullopt;
  };
  if (kind)
    *kind = ReadFileError::None;
  // O_NONBLOCK: opening a FIFO that has no writer returns at once (it is
  // then refused below); on a regular file the flag changes nothing.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int err = errno;
    return fail(err == ENOENT ? ReadFileError::Missing : ReadFileError::Open,
                rt::errnoText(err));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  // The type and size of what was opened, not of what the path names now.
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return fail(ReadFileError::Read, rt::errnoText(errno));
  if (!S_ISREG(st.st_mode))
    return fail(
        ReadFileError::NotRegular,
        fmt::format("it is {}, not a regular file", fileTypeName(st.st_mode)));
  if (uint64_t(st.st_size) > maxBytes)
    return fail(ReadFileError::TooLarge,
                fmt::format("it holds {} bytes, more than the limit of {} "
                            "bytes",
                            uint64_t(st.st_size), maxBytes));
  // At most maxBytes + 1 bytes: one more than the cap tells a file that
  // grew since fstat (or whose size fstat does not know) from one that fits.
  std::string data;
  data.reserve(size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {
    size_t want =
        size_t(std::min<uint64_t>(sizeof(buf), maxBytes + 1 - data.size()));
    ssize_t n = ::read(fd, buf, want);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return fail(ReadFileError::Read, rt::errnoText(errno));
    }
    if (n == 0)
      break;
    data.append(buf, size_t(n));
    if (data.size() > maxBytes)
      return fail(
          ReadFileError::TooLarge,
          fmt::format("it holds more than the limit of {} bytes", maxBytes));
  }
  return data;
}

namespace rt {

namespace {
std::string dirOf(const std::string &path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos)
    return ".";
  if (slash == 0)
    return "/";
  return path.substr(0, slash);
}

bool writeAll(int fd, const void *data, size_t size) {
  const char *p = static_cast<const char *>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    p += n;
    size -= size_t(n);
  }
  return true;
}
} // namespace

std::optional<std::string> writeFileAtomic(const std::string &path,
                                           const void *data, size_t size) {
  std::string tmpl = path + ".tmp.XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  int fd = ::mkstemp(name.data());
  if (fd < 0)
    return fmt::format("cannot create a temporary file next to '{}': {}", path,
                       errnoText(errno));
  std::string tmp(name.data());
  auto failWith = [&](const char *what) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return fmt::format("cannot {} '{}': {}", what, tmp, errnoText(err));
  };
  if (!writeAll(fd, data, size))
    return failWith("write");
  if (::fchmod(fd, 0644) != 0)
    return failWith("chmod");
  if (::fsync(fd) != 0)
    return failWith("fsync");
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return fmt::format("cannot close '{}': {}", tmp, errnoText(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return fmt::format("cannot rename '{}' to '{}': {}", tmp, path,
                       errnoText(err));
  }
  int dfd = ::open(dirOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd); // best effort: the data is already in place
    ::close(dfd);
  }
  return std::nullopt;
}

std::optional<std::string> makeDirs(const std::string &dir) {
  if (dir.empty())
    return std::string("empty directory name");
  std::string cur;
  size_t pos = 0;
  while (pos <= dir.size()) {
    size_t slash = dir.find('/', pos);
    if (slash == std::string::npos)
      slash = dir.size();
    cur = dir.substr(0, slash);
    pos = slash + 1;
    if (cur.empty())
      continue;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      return fmt::format("cannot create directory '{}': {}", cur,
                         errnoText(errno));
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0)
    return fmt::format("cannot stat '{}': {}", dir, errnoText(errno));
  if (!S_ISDIR(st.st_mode))
    return fmt::format("'{}' is not a directory", dir);
  return std::nullopt;
}

std::optional<std::string> makeTempDir(std::string *error) {
  const char *base = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(base && *base ? base : "/tmp") + "/kvgen-XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  if (!::mkdtemp(name.data())) {
    if (error)
      *error = fmt::format("cannot create a temporary directory '{}': {}", tmpl,
                           errnoText(errno));
    return std::nullopt;
  }
  return std::string(name.data());
}

void removeTempDir(const std::string &dir) {
  if (DIR *d = ::opendir(dir.c_str())) {
    while (struct dirent *e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..")
        ::unlink((dir + "/" + n).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

int runCommand(const std::string &command, std::string *output) {
  FILE *p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) {
    if (output)
      *output = fmt::format("cannot run '{}': {}", command, errnoText(errno));
    return -1;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0)
    if (output)
      output->append(buf, n);
  int status = ::pclose(p);
  if (status == -1)
    return -1;
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string shellQuote(const std::string &s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string hostCompiler() {
  const char *cxx = std::getenv("CXX");
  return cxx && *cxx ? std::string(cxx) : std::string("c++");
}

bool DynLib::open(const std::vector<std::string> &names, std::string *error) {
  std::string tried;
  for (const std::string &n : names) {
    void *h = ::dlopen(n.c_str(), RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    if (!h)
      h = ::dlopen(n.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (h) {
      handle = h;
      path = n;
      return true;
    }
    const char *e = ::dlerror();
    tried += fmt::format("\n  {}: {}", n, e ? e : "not found");
  }
  if (error)
    *error = "none of these libraries could be loaded:" + tried;
  return false;
}

void *DynLib::rawSym(const char *name) const {
  return handle ? ::dlsym(handle, name) : nullptr;
}

bool logHasWarning(const std::string &log) {
  std::string lower(log.size(), '\0');
  std::transform(log.begin(), log.end(), lower.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return lower.find("warning") != std::string::npos;
}

} // namespace rt
} // namespace kvgen
