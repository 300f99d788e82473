// Metrics in the Prometheus text format (version 0.0.4): counters, gauges and histograms in
// families with fixed label names, and gauges computed when scraped. One registry serves the
// process; anything may count from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/byte_count.h"

namespace cabin::metrics {

// Label values in the order of the family's label names. Never a session id: a label's values
// must stay few.
using LabelValues = std::vector<std::string>;

enum class Type { kCounter, kGauge, kHistogram };

class Registry {
 public:
  // Declares a family; using an undeclared one, or with the wrong number of labels, is a bug
  // (ignored in release builds, so that a metric never breaks a request).
  void declare(std::string name, Type type, std::string help, std::vector<std::string> labels,
               std::vector<double> buckets = {});
  void inc(std::string_view name, const LabelValues& labels, double by = 1);
  void observe(std::string_view name, const LabelValues& labels, double value);
  // Runs before each exposition, on the scraping thread: for gauges read off live state.
  void on_scrape(std::function<void(Registry&)> fill);
  // Sets every value of a family at once (those not named are dropped): gauges read off live
  // state, and counters kept elsewhere.
  void replace(std::string_view name, std::vector<std::pair<LabelValues, double>> values);

  std::string exposition();

 private:
  struct Histogram {
    std::vector<uint64_t> counts;  // per bucket, not cumulative
    double sum = 0;
    uint64_t count = 0;
  };
  struct Family {
    Type type = Type::kCounter;
    std::string help;
    std::vector<std::string> labels;
    std::vector<double> buckets;
    std::map<LabelValues, double> values;
    std::map<LabelValues, Histogram> histograms;
  };
  Family* find(std::string_view name, size_t label_count);

  std::mutex mutex_;
  std::map<std::string, Family, std::less<>> families_;
  std::vector<std::function<void(Registry&)>> fills_;
};

// The process's registry, with cabind's families declared.
Registry& registry();

// Holds a gauge one higher while it lives: an open connection of a kind.
class GaugeHold {
 public:
  GaugeHold() = default;
  GaugeHold(std::string name, LabelValues labels);
  GaugeHold(GaugeHold&& o) noexcept : name_(std::move(o.name_)), labels_(std::move(o.labels_)) {
    o.name_.clear();
  }
  GaugeHold& operator=(GaugeHold&&) = delete;
  GaugeHold(const GaugeHold&) = delete;
  GaugeHold& operator=(const GaugeHold&) = delete;
  ~GaugeHold();

 private:
  std::string name_;
  LabelValues labels_;
};

// Client connections whose bytes cabind relays to and from sandboxes.
enum class Relay { kCdp, kVnc, kFrames, kPreview };
// Where relays of `kind` count their bytes (cabin_relayed_bytes_total); valid for the process's
// life, on any thread.
RelayCounts relay_counts(Relay kind);

// The exposition's quoting of a label value: backslash, double quote and newline escaped.
std::string escape_label_value(std::string_view v);

// A session's end reason as a label value: one of a few (deleted, timeout, idle, shutdown,
// sandbox_exited, start_failed, other).
std::string end_reason_label(std::string_view reason);

}  // namespace cabin::metrics
