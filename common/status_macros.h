// Copyright walship authors.
//
// -----------------------------------------------------------------------------
// File: status_macros.h
// -----------------------------------------------------------------------------
//
// Early-return helpers for absl::Status and absl::StatusOr<T>. Our Abseil
// (20220623) ships neither ABSL_RETURN_IF_ERROR nor ABSL_ASSIGN_OR_RETURN, and
// a Status must never be dropped, so the project keeps exactly these two.
//
// Contract:
//   * The expression is evaluated exactly once.
//   * On error the Status is returned unchanged (code, message and payloads
//     intact); callers who want to add context do so explicitly with their own
//     `if (!s.ok())` rather than through a macro that rewrites messages.
//   * Both macros expand to statements, not expressions. They may be used
//     inside braces only; `if (x) WALSHIP_ASSIGN_OR_RETURN(...);` without
//     braces is not supported (the assignment would escape the `if`).
//   * The enclosing function must return absl::Status or absl::StatusOr<U>
//     (an absl::Status converts implicitly to the latter).
//
// Example:
//
//   absl::StatusOr<Config> LoadConfig(SysCalls& sys, const std::string& path) {
//     WALSHIP_ASSIGN_OR_RETURN(std::string text, ReadFileToString(sys, path));
//     Config config;
//     WALSHIP_RETURN_IF_ERROR(config.Parse(text));
//     return config;
//   }

#ifndef WALSHIP_COMMON_STATUS_MACROS_H_
#define WALSHIP_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

// WALSHIP_RETURN_IF_ERROR()
//
// Evaluates `expr`, which must yield an absl::Status, and returns it from the
// enclosing function if it is not OK.
#define WALSHIP_RETURN_IF_ERROR(expr)                              \
  do {                                                             \
    ::absl::Status walship_status_macros_status_ = (expr);         \
    if (ABSL_PREDICT_FALSE(!walship_status_macros_status_.ok())) { \
      return walship_status_macros_status_;                        \
    }                                                              \
  } while (false)

// WALSHIP_ASSIGN_OR_RETURN()
//
// Evaluates `expr`, which must yield an absl::StatusOr<T>. On error, returns
// its status from the enclosing function; otherwise moves the value into
// `lhs`. `lhs` may be an existing lvalue (`x`) or a declaration (`auto x`,
// `std::string x`). A `lhs` with an unparenthesized comma (`auto [a, b]`,
// `std::pair<int, int> p`) is split by the preprocessor and does not compile;
// declare such a variable first.
#define WALSHIP_ASSIGN_OR_RETURN(lhs, expr)                          \
  WALSHIP_STATUS_MACROS_ASSIGN_OR_RETURN_IMPL_(                      \
      WALSHIP_STATUS_MACROS_CONCAT_(walship_status_macros_statusor_, \
                                    __COUNTER__),                    \
      lhs, expr)

// Implementation details; not part of the API.
#define WALSHIP_STATUS_MACROS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                                 \
  if (ABSL_PREDICT_FALSE(!statusor.ok())) {                               \
    return std::move(statusor).status();                                  \
  }                                                                       \
  lhs = std::move(statusor).value()

#define WALSHIP_STATUS_MACROS_CONCAT_INNER_(x, y) x##y
#define WALSHIP_STATUS_MACROS_CONCAT_(x, y) \
  WALSHIP_STATUS_MACROS_CONCAT_INNER_(x, y)

#endif  // WALSHIP_COMMON_STATUS_MACROS_H_
