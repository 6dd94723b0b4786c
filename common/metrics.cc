#include "common/metrics.h"

#include <httplib.h>

#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace walship {
namespace {

std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.9g", v);
}

// `key` is "a=\"x\",b=\"y\"" or empty; adds one more label.
std::string WithLabel(const std::string& key, const std::string& name,
                      const std::string& value) {
  std::string extra = absl::StrCat(name, "=\"", value, "\"");
  return key.empty() ? extra : absl::StrCat(key, ",", extra);
}

std::string Braced(const std::string& key) {
  return key.empty() ? std::string() : absl::StrCat("{", key, "}");
}

}  // namespace

std::vector<double> LatencyBuckets() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
          0.025,   0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
}

std::string MetricsRegistry::LabelKey(const MetricLabels& labels) {
  std::string key;
  for (const auto& [k, v] : labels) {
    if (!key.empty()) key += ",";
    absl::StrAppend(&key, k, "=\"", Escape(v), "\"");
  }
  return key;
}

MetricsRegistry::Family MetricsRegistry::Declare(const std::string& name,
                                                 const std::string& help, Type type,
                                                 std::vector<double> bounds) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < families_.size(); ++i) {
    if (families_[i]->name == name) return Family(this, i);
  }
  auto f = std::make_unique<FamilyData>();
  f->name = name;
  f->help = help;
  f->type = type;
  f->bounds = std::move(bounds);
  families_.push_back(std::move(f));
  return Family(this, families_.size() - 1);
}

MetricsRegistry::Family MetricsRegistry::Counter(const std::string& name,
                                                 const std::string& help) {
  return Declare(name, help, Type::kCounter, {});
}
MetricsRegistry::Family MetricsRegistry::Gauge(const std::string& name,
                                               const std::string& help) {
  return Declare(name, help, Type::kGauge, {});
}
MetricsRegistry::Family MetricsRegistry::Histogram(const std::string& name,
                                                   const std::string& help,
                                                   std::vector<double> bounds) {
  return Declare(name, help, Type::kHistogram, std::move(bounds));
}

void MetricsRegistry::Family::Add(const MetricLabels& labels, double delta) const {
  absl::MutexLock lock(&registry_->mu_);
  FamilyData& f = *registry_->families_[index_];
  if (f.type == Type::kCounter && delta < 0) return;
  f.series[LabelKey(labels)].value += delta;
}

void MetricsRegistry::Family::Set(const MetricLabels& labels, double value) const {
  absl::MutexLock lock(&registry_->mu_);
  registry_->families_[index_]->series[LabelKey(labels)].value = value;
}

void MetricsRegistry::Family::Observe(const MetricLabels& labels, double value) const {
  absl::MutexLock lock(&registry_->mu_);
  FamilyData& f = *registry_->families_[index_];
  Series& s = f.series[LabelKey(labels)];
  if (s.buckets.size() != f.bounds.size()) s.buckets.assign(f.bounds.size(), 0);
  for (size_t i = 0; i < f.bounds.size(); ++i) {
    if (value <= f.bounds[i]) {
      ++s.buckets[i];
      break;
    }
  }
  ++s.count;
  s.sum += value;
}

void MetricsRegistry::Family::Clear() const {
  absl::MutexLock lock(&registry_->mu_);
  registry_->families_[index_]->series.clear();
}

void MetricsRegistry::AddCollector(std::function<void()> collector) {
  absl::MutexLock lock(&collectors_mu_);
  collectors_.push_back(std::move(collector));
}

double MetricsRegistry::Value(const std::string& name, const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  for (const auto& f : families_) {
    if (f->name != name) continue;
    auto it = f->series.find(LabelKey(labels));
    return it == f->series.end() ? 0 : it->second.value;
  }
  return 0;
}

std::string MetricsRegistry::Render() {
  {
    absl::MutexLock lock(&collectors_mu_);
    for (const auto& c : collectors_) c();
  }
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& f : families_) {
    const char* type = f->type == Type::kCounter ? "counter"
                       : f->type == Type::kGauge ? "gauge"
                                                 : "histogram";
    absl::StrAppend(&out, "# HELP ", f->name, " ", f->help, "\n# TYPE ", f->name, " ",
                    type, "\n");
    for (const auto& [key, s] : f->series) {
      if (f->type != Type::kHistogram) {
        absl::StrAppend(&out, f->name, Braced(key), " ", Number(s.value), "\n");
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i < f->bounds.size(); ++i) {
        cumulative += i < s.buckets.size() ? s.buckets[i] : 0;
        absl::StrAppend(&out, f->name, "_bucket",
                        Braced(WithLabel(key, "le", Number(f->bounds[i]))), " ",
                        cumulative, "\n");
      }
      absl::StrAppend(&out, f->name, "_bucket", Braced(WithLabel(key, "le", "+Inf")), " ",
                      s.count, "\n");
      absl::StrAppend(&out, f->name, "_sum", Braced(key), " ", Number(s.sum), "\n");
      absl::StrAppend(&out, f->name, "_count", Braced(key), " ", s.count, "\n");
    }
  }
  return out;
}

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
  // Notified by the listening thread once server.is_running() (httplib
  // makes its task queue right after setting it, see Start()).
  absl::Notification running;
};

MetricsServer::MetricsServer(MetricsRegistry& registry) : registry_(registry) {}

MetricsServer::~MetricsServer() { Stop(); }

absl::Status MetricsServer::Start(const std::string& host, uint16_t port) {
  impl_ = std::make_unique<Impl>();
  impl_->server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry_.Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  int bound = port == 0 ? impl_->server.bind_to_any_port(host.c_str())
                        : (impl_->server.bind_to_port(host.c_str(), port) ? port : -1);
  if (bound <= 0) {
    impl_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen for metrics on ", host, ":", port));
  }
  port_ = static_cast<uint16_t>(bound);
  // stop() is a no-op until the listen loop runs; wait for it so that a
  // Stop() right after Start() cannot leave the thread serving forever. The
  // loop marks itself running and then makes its task queue, so the queue's
  // factory tells when stop() will work.
  Impl* impl = impl_.get();
  impl->server.new_task_queue = [impl, make_queue = impl->server.new_task_queue] {
    impl->running.Notify();
    return make_queue();
  };
  impl->thread = std::thread([impl] { impl->server.listen_after_bind(); });
  impl->running.WaitForNotificationWithTimeout(absl::Seconds(5));
  return absl::OkStatus();
}

void MetricsServer::Stop() {
  if (!impl_) return;
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_.reset();
}

}  // namespace walship
