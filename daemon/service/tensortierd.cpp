// tensortierd: the tiering daemon.
#include <getopt.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "config/Config.h"
#include "core/Log.h"

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: tensortierd [--config PATH] [--check-config] [--print-config] [--version]\n"
               "  --config PATH    config file (default %s; absent = built-in defaults)\n"
               "  --check-config   parse and validate the config, print the verdict, exit 0 if valid\n"
               "  --print-config   print the effective config (defaults filled in) and exit\n",
               std::string(tt::config::kDefaultConfigPath).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string configPath(tt::config::kDefaultConfigPath);
  bool explicitConfig = false, checkOnly = false, printOnly = false;
  static const option longOptions[] = {{"config", required_argument, nullptr, 'c'},
                                       {"check-config", no_argument, nullptr, 'C'},
                                       {"print-config", no_argument, nullptr, 'P'},
                                       {"version", no_argument, nullptr, 'V'},
                                       {"help", no_argument, nullptr, 'h'},
                                       {nullptr, 0, nullptr, 0}};
  for (int opt; (opt = getopt_long(argc, argv, "c:h", longOptions, nullptr)) != -1;) {
    switch (opt) {
      case 'c': configPath = optarg, explicitConfig = true; break;
      case 'C': checkOnly = true; break;
      case 'P': printOnly = true; break;
      case 'V': std::printf("tensortierd %s\n", TT_VERSION); return 0;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }

  tt::config::DaemonConfig config;
  if (explicitConfig || access(configPath.c_str(), F_OK) == 0) {
    auto loaded = tt::config::loadConfigFile(configPath);
    if (!loaded) {
      TT_LOG(Error) << loaded.error().message();
      return 1;
    }
    config = std::move(*loaded);
  } else if (auto valid = tt::config::validateConfig(config); !valid) {
    TT_LOG(Error) << "built-in defaults: " << valid.error().message();
    return 1;
  }
  if (checkOnly) {
    std::printf("%s: valid\n", explicitConfig || access(configPath.c_str(), F_OK) == 0 ? configPath.c_str()
                                                                                       : "built-in defaults");
    return 0;
  }
  if (printOnly) {
    std::fputs(tt::config::effectiveConfigText(config).c_str(), stdout);
    return 0;
  }
  TT_LOG(Error) << "the serving loop is not built yet; only --check-config and --print-config work";
  return 2;
}
