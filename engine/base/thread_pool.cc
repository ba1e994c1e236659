#include "engine/base/thread_pool.h"

#include <algorithm>

namespace stepserve {
namespace {

// True on a pool worker and on a caller while it runs a ParallelFor: nested calls run inline
// instead of deadlocking on the pool they are already part of.
thread_local bool t_inside_parallel_for = false;

}  // namespace

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(num_threads >= 1
                       ? num_threads
                       : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::RunChunks() {
  for (;;) {
    const int64_t chunk = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (chunk >= n_chunks_) return;
    const int64_t begin = chunk * chunk_;
    const int64_t end = std::min(n_, begin + chunk_);
    (*body_)(begin, end);
  }
}

void ThreadPool::WorkerLoop() {
  t_inside_parallel_for = true;
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      // A worker joins only a job whose caller is still waiting for it (body_ set). One that
      // wakes after the caller closed the job must not join it: its chunk claims would land in
      // the counter of the caller's next job and run a chunk of that job twice (seen on 2-16
      // threads: in-place ops such as RoPE or the residual add then apply twice).
      work_cv_.wait(lock, [&] { return stop_ || (generation_ != seen && body_ != nullptr); });
      if (stop_) return;
      seen = generation_;
      ++busy_workers_;
    }
    RunChunks();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--busy_workers_ == 0) done_cv_.notify_all();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  if (num_threads_ == 1 || t_inside_parallel_for || n <= min_chunk) {
    body(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  // A few chunks per thread so a slow thread does not hold up the rest.
  const int64_t max_chunks = static_cast<int64_t>(num_threads_) * 4;
  const int64_t chunk = std::max(min_chunk, (n + max_chunks - 1) / max_chunks);
  {
    std::lock_guard<std::mutex> lock(mu_);
    body_ = &body;
    n_ = n;
    chunk_ = chunk;
    n_chunks_ = (n + chunk - 1) / chunk;
    next_chunk_.store(0, std::memory_order_relaxed);
    ++generation_;
  }
  work_cv_.notify_all();
  t_inside_parallel_for = true;
  RunChunks();
  t_inside_parallel_for = false;
  // Workers that joined may still be inside RunChunks; wait until all have left it, then close
  // the job under the same lock so no worker joins it from here on (see WorkerLoop).
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return busy_workers_ == 0; });
  body_ = nullptr;
}

}  // namespace stepserve
