// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "sqlite_support.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace saferetry {
namespace internal {

absl::Status SqliteError(sqlite3* db, int rc, std::string_view what) {
  std::string message = absl::StrCat(std::string(what), ": ",
                                     db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_READONLY:
      return absl::UnavailableError(message);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status PrepareFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  const bool created = fd >= 0;
  if (!created && errno == EEXIST) fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    const std::string message = absl::StrCat("path: ", path, ": ", std::strerror(err));
    if (err == ELOOP) {
      return absl::FailedPreconditionError(
          absl::StrCat("path: ", path, " is a symbolic link; the journal must be a regular file"));
    }
    if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(message);
    return absl::UnavailableError(message);
  }
  struct stat st {};
  absl::Status status;
  if (fstat(fd, &st) != 0) {
    status = absl::UnavailableError(absl::StrCat("path: ", path, ": ", std::strerror(errno)));
  } else if (!S_ISREG(st.st_mode)) {
    status = absl::FailedPreconditionError(absl::StrCat("path: ", path, " is not a regular file"));
  } else if (created) {
    // The umask may have taken bits away (even the owner's): set exactly 0600.
    if (fchmod(fd, 0600) != 0) {
      status = absl::UnavailableError(absl::StrCat("path: ", path, ": ", std::strerror(errno)));
    }
  } else if ((st.st_mode & 077) != 0) {
    status = absl::FailedPreconditionError(absl::StrCat(
        "path: ", path, " is accessible by group or others (mode 0", (st.st_mode & 0777) >> 6,
        (st.st_mode & 077) >> 3, st.st_mode & 07, "); the journal must be 0600 (chmod 600)"));
  }
  close(fd);
  return status;
}

// SQLite creates -wal and -shm with the database file's mode; a stale one
// left with a wider mode is refused all the same.
absl::Status CheckCompanionFiles(const std::string& path) {
  for (const char* suffix : {"-wal", "-shm"}) {
    const std::string file = path + suffix;
    struct stat st {};
    if (lstat(file.c_str(), &st) != 0) continue;  // not there (yet)
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "path: ", file, " is not a regular file of mode 0600; the journal refuses it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace saferetry
