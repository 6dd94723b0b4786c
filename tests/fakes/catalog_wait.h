// catalog_wait.h: a bounded wait on a SegmentCatalog for tests of sources.
#ifndef WALSHIP_TESTS_FAKES_CATALOG_WAIT_H_
#define WALSHIP_TESTS_FAKES_CATALOG_WAIT_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/segment_catalog.h"

namespace walship::testing {

// Waits (at most 10 s) until `pred(snapshot)` holds; returns the last
// snapshot, which the caller checks.
template <typename Pred>
agent::CatalogSnapshot WaitForCatalog(const agent::SegmentCatalog& catalog, Pred pred) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  agent::CatalogSnapshot s = catalog.Get();
  while (!pred(s) && absl::Now() < deadline) {
    catalog.WaitForChange(s.version, absl::Now() + absl::Milliseconds(100));
    s = catalog.Get();
  }
  return s;
}

}  // namespace walship::testing

#endif  // WALSHIP_TESTS_FAKES_CATALOG_WAIT_H_
