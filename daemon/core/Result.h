// Expected-style results for every fallible call.
//
// C++20 has no std::expected, and this is small enough that a dependency (Boost.Outcome) would cost
// more in readability than it saves. An Error carries the errno value (0 when the failure did not
// come from the kernel or libc) and a context string that says what was being attempted, so a
// message reads like "move_pages pid 42 (16 pages): Operation not permitted".
#pragma once

#include <cerrno>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace tt {

struct Error {
  int code = 0;         // errno value, or 0 for a logical error (bad input, parse failure)
  std::string context;  // what was being done, and on what

  // "context: strerror(code)" or just the context when code is 0.
  [[nodiscard]] std::string message() const;
};

// Error from an explicit errno value.
[[nodiscard]] Error systemError(int code, std::string context);
// Error from the current errno; call right after the failing call.
[[nodiscard]] Error errnoError(std::string context);
// Error with no errno (invalid input, unmet precondition).
[[nodiscard]] Error logicError(std::string context);

template <class T>
class [[nodiscard]] Result {
 public:
  Result(const T& value) : v_(value) {}  // NOLINT: implicit by design, like std::expected
  Result(T&& value) : v_(std::move(value)) {}
  Result(Error error) : v_(std::move(error)) {}

  [[nodiscard]] bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  [[nodiscard]] T& value() & { return std::get<0>(v_); }
  [[nodiscard]] const T& value() const& { return std::get<0>(v_); }
  [[nodiscard]] T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  [[nodiscard]] const Error& error() const { return std::get<1>(v_); }

  template <class U>
  [[nodiscard]] T value_or(U&& fallback) const& {
    return ok() ? value() : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit by design

  [[nodiscard]] bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  [[nodiscard]] const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

// Prefixes more context onto a failed result's error: "loading config: open /etc/...: ENOENT".
[[nodiscard]] Error withContext(const Error& inner, const std::string& outer);

}  // namespace tt
