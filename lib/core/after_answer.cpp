#include "lib/core/after_answer.hpp"

#include <exception>
#include <string>
#include <utility>

#include "lib/core/log.hpp"

namespace sandweave {
namespace {

thread_local AfterAnswer* current = nullptr;

void run_logged(const std::function<void()>& work) noexcept {
    try {
        work();
    } catch (const std::exception& e) {
        log().warn(std::string("after the answer: ") + e.what());
    } catch (...) {
        log().warn("after the answer: unknown error");
    }
}

}  // namespace

AfterAnswer::AfterAnswer() : outer_(current) {
    current = this;
}

AfterAnswer::~AfterAnswer() {
    current = outer_;
    // Work deferred while this runs goes to the outer scope, or runs at once:
    // nothing is left behind.
    for (auto& w : work_) run_logged(w);
}

void after_answer(std::function<void()> work) {
    if (current) {
        current->work_.push_back(std::move(work));
        return;
    }
    run_logged(work);
}

bool answer_pending() {
    return current != nullptr;
}

}  // namespace sandweave
