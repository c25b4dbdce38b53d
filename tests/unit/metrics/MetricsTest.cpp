// Prometheus text exposition: HELP/TYPE lines, label escaping, histogram buckets, and a scrape
// over loopback HTTP.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <thread>

#include "metrics/HttpExporter.h"
#include "metrics/Metrics.h"
#include "support/HttpGet.h"

namespace {

using tt::metrics::Registry;

TEST(Metrics, CounterAndGaugeExposition) {
  Registry r;
  r.counter("tt_moves_total", "Moves done").add(3);
  r.counter("tt_moves_total", "Moves done").inc();
  r.counter("tt_moves_total", "Moves done").add(-5);  // ignored
  r.gauge("tt_bytes", "Bytes", {{"pid", "42"}}).set(1.5);
  EXPECT_EQ(r.render(),
            "# HELP tt_bytes Bytes\n"
            "# TYPE tt_bytes gauge\n"
            "tt_bytes{pid=\"42\"} 1.5\n"
            "# HELP tt_moves_total Moves done\n"
            "# TYPE tt_moves_total counter\n"
            "tt_moves_total 4\n");
}

TEST(Metrics, LabelValuesAreEscaped) {
  Registry r;
  r.counter("c", "h", {{"why", "a\"b\\c\nd"}}).inc();
  EXPECT_NE(r.render().find("c{why=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << r.render();
}

TEST(Metrics, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Registry r;
  auto& h = r.histogram("lat_seconds", "Latency", {0.1, 1});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(0.5);
  h.observe(7);
  EXPECT_EQ(r.render(),
            "# HELP lat_seconds Latency\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{le=\"0.1\"} 1\n"
            "lat_seconds_bucket{le=\"1\"} 3\n"
            "lat_seconds_bucket{le=\"+Inf\"} 4\n"
            "lat_seconds_sum 8.05\n"
            "lat_seconds_count 4\n");
}

TEST(Metrics, RemovedSeriesDisappear) {
  Registry r;
  r.gauge("g", "h", {{"pid", "1"}}).set(1);
  r.gauge("g", "h", {{"pid", "2"}}).set(2);
  r.removeSeries("g", {{"pid", "1"}});
  const std::string text = r.render();
  EXPECT_EQ(text.find("pid=\"1\""), std::string::npos);
  EXPECT_NE(text.find("g{pid=\"2\"} 2\n"), std::string::npos);
}

// A collector runs at each render, before the text is made, and may set series itself (it runs
// outside the registry's lock: creating a series there would deadlock otherwise).
TEST(Metrics, CollectorsSetTheirSeriesAtEachRender) {
  Registry r;
  int queued = 3;
  r.addCollector([&] { r.gauge("tt_queued", "Queued").set(queued); });
  EXPECT_NE(r.render().find("tt_queued 3\n"), std::string::npos) << r.render();
  queued = 0;
  EXPECT_NE(r.render().find("tt_queued 0\n"), std::string::npos) << "read at the render, not when added";
}

TEST(Metrics, ConcurrentUpdatesAreNotLost) {
  Registry r;
  auto& c = r.counter("n", "h");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&c] {
      for (int i = 0; i < 10000; ++i) c.inc();
    });
  for (auto& t : threads) t.join();
  EXPECT_DOUBLE_EQ(c.value(), 40000);
}

TEST(Metrics, HttpExporterServesTheRegistryOnLoopback) {
  Registry r;
  r.counter("tensortier_test_total", "t").add(2);
  boost::asio::io_context io;
  tt::metrics::HttpExporter exporter(io, r);
  auto port = exporter.start(0);
  ASSERT_TRUE(port.ok()) << port.error().message();
  std::thread loop([&io] { io.run(); });
  const std::string ok = tt::test::httpGetLoopback(*port, "/metrics");
  const std::string missing = tt::test::httpGetLoopback(*port, "/nope");
  exporter.stop();
  io.stop();
  loop.join();
  EXPECT_NE(ok.find("HTTP/1.1 200 OK"), std::string::npos) << ok;
  EXPECT_NE(ok.find("text/plain; version=0.0.4"), std::string::npos) << ok;
  EXPECT_NE(ok.find("tensortier_test_total 2\n"), std::string::npos) << ok;
  EXPECT_NE(missing.find("404"), std::string::npos) << missing;
}

}  // namespace
