#include "PerfStreamFixtures.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>

#include "support/TestSupport.h"

namespace tt::test {

PerfStream readPerfStream(const std::string& path) {
  PerfStream s;
  std::istringstream in(readFileOrFail(path));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("sample_type ", 0) == 0) {
      s.sampleType = std::stoull(line.substr(12), nullptr, 16);
      continue;
    }
    std::istringstream bytes(line);
    std::string b;
    std::vector<uint8_t> rec;
    while (bytes >> b) rec.push_back(static_cast<uint8_t>(std::stoul(b, nullptr, 16)));
    s.records.push_back(std::move(rec));
  }
  if (s.records.empty()) ADD_FAILURE() << path << " holds no records";
  return s;
}

std::string formatPerfStream(const PerfStream& stream, const std::string& comment) {
  std::ostringstream out;
  std::istringstream c(comment);
  std::string line;
  while (std::getline(c, line)) out << "# " << line << "\n";
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(stream.sampleType));
  out << "sample_type " << buf << "\n";
  for (const auto& r : stream.records) {
    for (size_t i = 0; i < r.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%02x", r[i]);
      out << (i ? " " : "") << buf;
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace tt::test
