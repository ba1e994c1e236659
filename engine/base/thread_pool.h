// A fixed-size thread pool with a blocking parallel-for, used by the CPU kernels.
//
//   ThreadPool pool(8);                       // 0 = std::thread::hardware_concurrency()
//   pool.ParallelFor(n, /*min_chunk=*/16, [&](int64_t begin, int64_t end) { ... });
//
// The calling thread works too, so a pool of N threads starts N-1 workers. Calls from inside a
// ParallelFor body (nested) and calls on a pool of one thread run inline on the caller. Concurrent
// ParallelFor calls from different threads are serialised.
#ifndef STEPSERVE_ENGINE_BASE_THREAD_POOL_H_
#define STEPSERVE_ENGINE_BASE_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace stepserve {

class ThreadPool {
 public:
  // `num_threads` counts the caller; values < 1 mean hardware_concurrency (at least 1).
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Splits [0, n) into contiguous chunks of at least `min_chunk` items (the last may be shorter)
  // and calls body(begin, end) once per chunk, spread over the threads. Returns when every chunk
  // is done. Chunks are handed out dynamically, so uneven work balances itself.
  void ParallelFor(int64_t n, int64_t min_chunk,
                   const std::function<void(int64_t begin, int64_t end)>& body);

 private:
  void WorkerLoop();
  // Claims and runs chunks of the current job until none are left.
  void RunChunks();

  const int num_threads_;
  std::vector<std::thread> workers_;

  std::mutex call_mu_;  // serialises ParallelFor callers

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;  // bumped for each job; workers wake when it changes
  bool stop_ = false;
  int busy_workers_ = 0;

  // The current job; written under mu_ before generation_ is bumped.
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  int64_t n_chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};
};

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_BASE_THREAD_POOL_H_
