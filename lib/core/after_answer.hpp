#pragma once
// Work that may wait until the caller has its answer. `serve` answers a request
// before its thread's last steps: code that wakes a helper process, or frees
// what a rename replaced, hands that to after_answer() and it runs once the
// answer is written, rather than taking the CPU (a woken process preempts its
// waker) or a synchronous discard from the answer. Without an AfterAnswer on
// the calling thread the work runs at once, so a caller that cannot defer
// (the CLI, a test) sees no difference.

#include <functional>
#include <vector>

namespace sandweave {

class AfterAnswer {
  public:
    AfterAnswer();   // work deferred on this thread waits for this scope
    ~AfterAnswer();  // runs it; a failure is logged, never thrown
    AfterAnswer(const AfterAnswer&) = delete;
    AfterAnswer& operator=(const AfterAnswer&) = delete;

  private:
    std::vector<std::function<void()>> work_;
    AfterAnswer* outer_;
    friend void after_answer(std::function<void()> work);
    friend bool answer_pending();
};

// Runs `work` after the innermost AfterAnswer of this thread, or now. For
// best-effort work: what it throws is logged, never seen by the caller.
void after_answer(std::function<void()> work);
// An AfterAnswer is alive on this thread: deferred work waits.
bool answer_pending();

}  // namespace sandweave
