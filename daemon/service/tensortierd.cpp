// tensortierd: the tiering daemon.
#include <getopt.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>

#include "config/Config.h"
#include "core/Log.h"
#include "service/Daemon.h"

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: tensortierd [--config PATH] [--socket PATH] [--foreground] [--check-config] [--print-config]\n"
               "                   [--prepare-kernel-tiering] [--restore-kernel-tiering] [--version]\n"
               "  --config PATH    config file (default %s; absent = built-in defaults)\n"
               "  --socket PATH    serve on this socket (overrides service.socket_path and socket activation)\n"
               "  --foreground     run in the foreground (the only mode: systemd runs it as Type=notify)\n"
               "  --check-config   parse and validate the config, print the verdict, exit 0 if valid\n"
               "  --print-config   print the effective config (defaults filled in) and exit\n"
               "  --prepare-kernel-tiering\n"
               "                   with sources.kernel_tiering DISABLE, turn the kernel's tiering off for the\n"
               "                   service and exit (ExecStartPre, with the privileges the daemon lacks)\n"
               "  --restore-kernel-tiering\n"
               "                   write back the kernel tiering values saved in sources.kernel_tiering_state_file\n"
               "                   (by --prepare-kernel-tiering, or by a daemon that did not exit cleanly), if any,\n"
               "                   and exit (ExecStopPost)\n",
               std::string(tt::config::kDefaultConfigPath).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string configPath(tt::config::kDefaultConfigPath);
  std::optional<std::string> socketPath;
  bool explicitConfig = false, checkOnly = false, printOnly = false, restoreOnly = false, prepareOnly = false;
  static const option longOptions[] = {{"config", required_argument, nullptr, 'c'},
                                       {"socket", required_argument, nullptr, 's'},
                                       {"foreground", no_argument, nullptr, 'f'},
                                       {"check-config", no_argument, nullptr, 'C'},
                                       {"print-config", no_argument, nullptr, 'P'},
                                       {"restore-kernel-tiering", no_argument, nullptr, 'R'},
                                       {"prepare-kernel-tiering", no_argument, nullptr, 'K'},
                                       {"version", no_argument, nullptr, 'V'},
                                       {"help", no_argument, nullptr, 'h'},
                                       {nullptr, 0, nullptr, 0}};
  for (int opt; (opt = getopt_long(argc, argv, "c:s:fh", longOptions, nullptr)) != -1;) {
    switch (opt) {
      case 'c': configPath = optarg, explicitConfig = true; break;
      case 's': socketPath = optarg; break;
      case 'f': break;
      case 'C': checkOnly = true; break;
      case 'P': printOnly = true; break;
      case 'R': restoreOnly = true; break;
      case 'K': prepareOnly = true; break;
      case 'V': std::printf("tensortierd %s\n", TT_VERSION); return 0;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    usage(stderr);
    return 2;
  }

  tt::config::DaemonConfig config;
  const bool haveFile = explicitConfig || access(configPath.c_str(), F_OK) == 0;
  if (haveFile) {
    auto loaded = tt::config::loadConfigFile(configPath);
    if (!loaded && restoreOnly) {
      // Restoring matters more than the config: the state file is most likely at its default.
      TT_LOG(Warn) << loaded.error().message() << "; restoring with the built-in defaults";
      return tt::service::restoreKernelTiering(config.sources()) ? 0 : 1;
    }
    if (!loaded) {
      TT_LOG(Error) << loaded.error().message();
      return 1;
    }
    config = std::move(*loaded);
  } else if (auto valid = tt::config::validateConfig(config); !valid) {
    TT_LOG(Error) << "built-in defaults: " << valid.error().message();
    return 1;
  }
  if (restoreOnly) return tt::service::restoreKernelTiering(config.sources()) ? 0 : 1;
  // Exit 0 whatever happened: the service should still start, and the daemon reports the state.
  if (prepareOnly) {
    (void)tt::service::prepareKernelTiering(config.sources());
    return 0;
  }
  if (checkOnly) {
    std::printf("%s: valid\n", haveFile ? configPath.c_str() : "built-in defaults");
    return 0;
  }
  if (printOnly) {
    std::fputs(tt::config::effectiveConfigText(config).c_str(), stdout);
    return 0;
  }
  if (socketPath && socketPath->empty()) {
    TT_LOG(Error) << "--socket needs a path";
    return 2;
  }
  return tt::service::runDaemon({haveFile ? configPath : std::string(), socketPath, TT_VERSION}, std::move(config));
}
