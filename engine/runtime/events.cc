#include "engine/runtime/events.h"

namespace stepserve::engine {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kDeadlineExceeded:
      return "deadline_exceeded";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

}  // namespace stepserve::engine
