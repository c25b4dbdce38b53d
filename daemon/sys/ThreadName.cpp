#include "sys/ThreadName.h"

#include <pthread.h>

#include <string>

namespace tt::sys {

void nameThisThread(std::string_view name) {
  const std::string shortName(name.substr(0, 15));
  (void)pthread_setname_np(pthread_self(), shortName.c_str());
}

}  // namespace tt::sys
