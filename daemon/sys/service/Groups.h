// Users and groups (NSS): the socket's group, and whether a peer uid belongs to the admin group.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "core/Result.h"

namespace tt::sys {

// getgrnam_r: the gid of `name`, nullopt when no such group exists.
[[nodiscard]] Result<std::optional<gid_t>> groupId(const std::string& name);

// Whether `uid`'s primary or supplementary groups (getgrouplist) include `gid`. A uid with no
// passwd entry belongs to no group.
[[nodiscard]] Result<bool> uidInGroup(uid_t uid, gid_t gid);

}  // namespace tt::sys
