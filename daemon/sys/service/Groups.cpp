#include "sys/service/Groups.h"

#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <vector>

namespace tt::sys {

Result<std::optional<gid_t>> groupId(const std::string& name) {
  group gr{};
  group* found = nullptr;
  std::vector<char> buf(16384);
  const int rc = ::getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &found);
  if (rc != 0) return systemError(rc, "getgrnam " + name);
  if (!found) return std::optional<gid_t>{};
  return std::optional<gid_t>{found->gr_gid};
}

Result<bool> uidInGroup(uid_t uid, gid_t gid) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  const int rc = ::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found);
  if (rc != 0) return systemError(rc, "getpwuid " + std::to_string(uid));
  if (!found) return false;
  if (found->pw_gid == gid) return true;
  int count = 64;
  std::vector<gid_t> groups(static_cast<size_t>(count));
  while (::getgrouplist(found->pw_name, found->pw_gid, groups.data(), &count) < 0) {
    if (count <= static_cast<int>(groups.size())) return logicError("getgrouplist " + std::string(found->pw_name));
    groups.resize(static_cast<size_t>(count));
  }
  groups.resize(static_cast<size_t>(count));
  return std::find(groups.begin(), groups.end(), gid) != groups.end();
}

}  // namespace tt::sys
