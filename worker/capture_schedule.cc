#include "worker/capture_schedule.h"

namespace dtrun::worker {

CaptureSchedule::Decision CaptureSchedule::Next(int image_size, int count, int full_batch) {
  Decision d;
  const bool full = count == full_batch;
  if (!full) {
    d.action = has_graph_ ? Action::kEagerBesideGraph : Action::kEager;
    return d;
  }
  if (std::make_pair(image_size, count) != shape_) {
    d.drop_graph = has_graph_;
    has_graph_ = false;
    shape_ = {image_size, count};
    eager_steps_at_shape_ = 0;
  }
  if (has_graph_) {
    d.action = Action::kReplay;
  } else if (graphs_ && eager_steps_at_shape_ >= kEagerStepsBeforeCapture) {
    d.action = Action::kCapture;
  } else {
    d.action = Action::kEager;
    ++eager_steps_at_shape_;
  }
  return d;
}

void CaptureSchedule::CaptureDone(bool ok) {
  has_graph_ = ok;
  if (!ok) graphs_ = false;
}

}  // namespace dtrun::worker
