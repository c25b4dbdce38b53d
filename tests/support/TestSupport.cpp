#include "support/TestSupport.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace tt::test {

std::string fixture(const std::string& relative) { return std::string(TT_FIXTURES_DIR) + "/" + relative; }
std::string sourcePath(const std::string& relative) { return std::string(TT_SOURCE_DIR) + "/" + relative; }

std::string readFileOrFail(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "cannot open " << path;
    return {};
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool isRoot() { return geteuid() == 0; }

}  // namespace tt::test
