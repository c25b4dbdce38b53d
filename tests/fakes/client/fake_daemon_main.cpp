// tt_fake_client_daemon: the FakeDaemon as a process, for tests in other languages (Python) and the
// client benchmark. Usage: tt_fake_client_daemon --socket PATH
// Prints one JSON line {"event":"ready",...} when listening, then answers commands on stdin, one
// JSON line each: regions | marks | hellos | sessions | stop | start | mbind REGION_ID NODE | quit.
// Exits on quit or EOF on stdin.
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "fakes/client/FakeDaemon.h"

int main(int argc, char** argv) {
  std::string socket;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--socket") == 0) socket = argv[i + 1];
  if (socket.empty()) {
    std::cerr << "usage: tt_fake_client_daemon --socket PATH\n";
    return 2;
  }
  tt::fake::FakeDaemon fake(socket);
  if (auto started = fake.start(); !started) {
    std::cerr << "tt_fake_client_daemon: " << started.error().message() << "\n";
    return 1;
  }
  std::cout << nlohmann::json{{"event", "ready"}, {"socket", socket}, {"pid", getpid()}}.dump() << std::endl;
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    nlohmann::json out;
    if (cmd == "regions") {
      out["regions"] = nlohmann::json::array();
      for (const auto& r : fake.regions())
        out["regions"].push_back({{"id", r.id}, {"session", r.session}, {"address", r.address}, {"length", r.length},
                                  {"name", r.name}, {"kind", r.kind}, {"tag", r.clientTag}});
    } else if (cmd == "marks") {
      out["marks"] = nlohmann::json::array();
      for (const auto& m : fake.marks())
        out["marks"].push_back({{"type", m.type}, {"step", m.step}, {"phase", m.phase}, {"session", m.session}});
    } else if (cmd == "hellos") {
      out["hellos"] = nlohmann::json::array();
      for (const auto& h : fake.hellos())
        out["hellos"].push_back({{"session", h.session}, {"versions", h.versions}, {"name", h.clientName},
                                 {"accepts_mbind", h.acceptsMbind}});
    } else if (cmd == "sessions") {
      out["sessions"] = fake.liveSessions();
    } else if (cmd == "stop") {
      fake.stop();
      out["ok"] = true;
    } else if (cmd == "start") {
      auto started = fake.start();
      out["ok"] = started.ok();
      if (!started) out["error"] = started.error().message();
    } else if (cmd == "mbind") {
      uint64_t id = 0;
      int32_t node = 0;
      in >> id >> node;
      std::optional<int32_t> result;
      for (const auto& r : fake.regions())
        if (r.id == id) result = fake.mbind(id, r.address, r.length, node);
      out["errno"] = result ? nlohmann::json(*result) : nlohmann::json(nullptr);
    } else if (cmd == "quit") {
      break;
    } else {
      out["error"] = "unknown command: " + cmd;
    }
    std::cout << out.dump() << std::endl;
  }
  fake.stop();
  return 0;
}
