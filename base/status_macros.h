// Early-return helpers for absl::Status / absl::StatusOr (Abseil 20220623 ships none).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DT_STATUS_CONCAT_INNER_(a, b) a##b
#define DT_STATUS_CONCAT_(a, b) DT_STATUS_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define DT_RETURN_IF_ERROR(expr)                  \
  do {                                            \
    ::absl::Status dt_status_ = (expr);           \
    if (!dt_status_.ok()) return dt_status_;      \
  } while (0)

// `DT_ASSIGN_OR_RETURN(auto x, MakeX());` — assigns the value or returns the error.
#define DT_ASSIGN_OR_RETURN(lhs, expr) \
  DT_ASSIGN_OR_RETURN_IMPL_(DT_STATUS_CONCAT_(dt_statusor_, __LINE__), lhs, expr)
#define DT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
