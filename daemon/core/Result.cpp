#include "core/Result.h"

#include <cstring>

namespace tt {

std::string Error::message() const {
  if (code == 0) return context;
  char buf[128];
  // GNU strerror_r returns the message pointer, which may or may not be buf.
  const char* text = strerror_r(code, buf, sizeof buf);
  return context + ": " + text;
}

Error systemError(int code, std::string context) { return Error{code, std::move(context)}; }
Error errnoError(std::string context) { return Error{errno, std::move(context)}; }
Error logicError(std::string context) { return Error{0, std::move(context)}; }

Error withContext(const Error& inner, const std::string& outer) {
  return Error{inner.code, outer + ": " + inner.context};
}

}  // namespace tt
