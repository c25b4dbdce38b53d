#include "support/TestSupport.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>

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

bool kernelAtLeast(int major, int minor) {
  utsname u{};
  int haveMajor = 0, haveMinor = 0;
  if (uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &haveMajor, &haveMinor) != 2) {
    ADD_FAILURE() << "cannot read the kernel release";
    return false;
  }
  return haveMajor > major || (haveMajor == major && haveMinor >= minor);
}

}  // namespace tt::test
