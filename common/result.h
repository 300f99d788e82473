// Result<T>: a value or an Error with a stable code and a human message; no exceptions on the data path.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace cabin {

// Error codes are part of the public API (they reach clients as JSON "code").
enum class Errc {
  kInvalidArgument,   // 400
  kUnauthenticated,   // 401
  kPermissionDenied,  // 403
  kNotFound,          // 404
  kMethodNotAllowed,  // 405
  kConflict,          // 409
  kTooLarge,          // 413
  kUriTooLong,        // 414
  kMisdirected,       // 421
  kUnprocessable,     // 422
  kTooManyRequests,   // 429
  kHeadersTooLarge,   // 431
  kUnavailable,       // 503
  kTimeout,           // 504
  kBadGateway,        // 502
  kInternal,          // 500
};

struct Error {
  Errc errc = Errc::kInternal;
  std::string code;     // machine-readable, e.g. "invalid_spec"
  std::string message;  // for people
  int64_t retry_after_s = 0;  // > 0: worth trying again after this long (a Retry-After header)
};

inline Error make_error(Errc errc, std::string code, std::string message) {
  return Error{errc, std::move(code), std::move(message)};
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& value() const& { return std::get<0>(v_); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& operator*() { return std::get<0>(v_); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : err_(std::move(error)), ok_(false) {}  // NOLINT
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return err_; }

 private:
  Error err_;
  bool ok_ = true;
};

// Early returns on an error, for functions that return Result<U> (or Error). `expr` is a Result.
//   CABIN_TRY(check(x));                           // Result<void> or any Result, value unused
//   CABIN_ASSIGN_OR_RETURN(auto n, parse_int(s));  // n is the value
// The CO_ forms do the same with co_return, in coroutines.
#define CABIN_CONCAT_INNER(a, b) a##b
#define CABIN_CONCAT(a, b) CABIN_CONCAT_INNER(a, b)
#define CABIN_TRY(expr)                            \
  do {                                             \
    if (auto&& cabin_try_ = (expr); !cabin_try_) { \
      return cabin_try_.error();                   \
    }                                              \
  } while (0)
#define CABIN_CO_TRY(expr)                         \
  do {                                             \
    if (auto&& cabin_try_ = (expr); !cabin_try_) { \
      co_return cabin_try_.error();                \
    }                                              \
  } while (0)
#define CABIN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr, ret) \
  auto tmp = (expr);                                     \
  if (!tmp) ret tmp.error();                             \
  lhs = std::move(*tmp)
#define CABIN_ASSIGN_OR_RETURN(lhs, expr) \
  CABIN_ASSIGN_OR_RETURN_IMPL(CABIN_CONCAT(cabin_result_, __LINE__), lhs, expr, return)
#define CABIN_CO_ASSIGN_OR_RETURN(lhs, expr) \
  CABIN_ASSIGN_OR_RETURN_IMPL(CABIN_CONCAT(cabin_result_, __LINE__), lhs, expr, co_return)

inline int http_status(Errc e) {
  switch (e) {
    case Errc::kInvalidArgument: return 400;
    case Errc::kUnauthenticated: return 401;
    case Errc::kPermissionDenied: return 403;
    case Errc::kNotFound: return 404;
    case Errc::kMethodNotAllowed: return 405;
    case Errc::kConflict: return 409;
    case Errc::kTooLarge: return 413;
    case Errc::kUriTooLong:
      return 414;
    case Errc::kMisdirected:
      return 421;
    case Errc::kUnprocessable:
      return 422;
    case Errc::kTooManyRequests: return 429;
    case Errc::kHeadersTooLarge:
      return 431;
    case Errc::kUnavailable: return 503;
    case Errc::kTimeout: return 504;
    case Errc::kBadGateway: return 502;
    case Errc::kInternal: return 500;
  }
  return 500;
}

}  // namespace cabin
