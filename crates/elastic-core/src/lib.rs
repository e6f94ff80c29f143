//! Decide: the step controller, the no-burst CPU token bucket, the work queue and the handle.
