// Stmt: one prepared SQLite statement, owned; opening the database, and the store's error for a
// failed call. Shared by the session and key stores, which use one database.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "common/result.h"

namespace cabin::store {

// Owns one prepared statement.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool ok() const { return s_ != nullptr; }
  Stmt& bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  int step() { return sqlite3_step(s_); }
  std::string text(int i) const {
    auto p = sqlite3_column_text(s_, i);
    return p ? reinterpret_cast<const char*>(p) : "";
  }
  int64_t integer(int i) const { return sqlite3_column_int64(s_, i); }

 private:
  sqlite3_stmt* s_ = nullptr;
};

inline Error db_error(sqlite3* db, const char* what) {
  return make_error(Errc::kInternal, "store", std::string(what) + ": " + sqlite3_errmsg(db));
}

// Runs `sql` (one or more statements, no results).
inline Result<void> exec_sql(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown";
    sqlite3_free(err);
    return make_error(Errc::kInternal, "store", msg);
  }
  return {};
}

// The database at `path` (created if missing), for one thread: ":memory:" is a private one.
inline Result<sqlite3*> open_database(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    Error e = db_error(db, "open");
    sqlite3_close(db);
    return e;
  }
  return db;
}

}  // namespace cabin::store
