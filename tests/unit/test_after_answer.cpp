// lib/core/after_answer and the writes it defers in lib/core/fsutil: work a
// request leaves for after its answer runs then, in order, and is never lost;
// a replaced state file is freed after the answer and never left behind.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "lib/core/after_answer.hpp"
#include "lib/core/fsutil.hpp"

using namespace sandweave;
namespace fs = std::filesystem;

namespace {

nlink_t links(const fs::path& p) {
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    return st.st_nlink;
}

std::size_t entries(const fs::path& dir) {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
    return n;
}

}  // namespace

TEST_SUITE("after_answer") {
    TEST_CASE("without a scope the work runs at once; in one it waits for the scope's end") {
        std::vector<std::string> done;
        CHECK_FALSE(answer_pending());
        after_answer([&] { done.push_back("now"); });
        CHECK(done == std::vector<std::string>{"now"});
        {
            AfterAnswer scope;
            CHECK(answer_pending());
            after_answer([&] { done.push_back("first"); });
            after_answer([&] { throw std::runtime_error("logged, not thrown"); });
            after_answer([&] { done.push_back("second"); });
            CHECK(done.size() == 1);
        }
        CHECK_FALSE(answer_pending());
        CHECK(done == std::vector<std::string>{"now", "first", "second"});
    }

    TEST_CASE("an inner scope runs its own work; work deferred by deferred work is not lost") {
        std::vector<std::string> done;
        {
            AfterAnswer outer;
            {
                AfterAnswer inner;
                after_answer([&] {
                    done.push_back("inner");
                    after_answer([&] { done.push_back("from inner's work"); });
                });
            }
            CHECK(done == std::vector<std::string>{"inner"});
        }
        CHECK(done == std::vector<std::string>{"inner", "from inner's work"});
    }

    TEST_CASE(
        "a live write replaced while an answer is pending keeps the old file until it is sent") {
        fs::path dir = fs::temp_directory_path() / ("sw-after-" + random_hex(8));
        fs::create_directories(dir);
        fs::path rec = dir / "sandbox.json";
        write_file_atomic(rec, "old", 0600, Durability::live);
        {
            AfterAnswer scope;
            write_file_atomic(rec, "new", 0600, Durability::live);
            CHECK(read_file(rec) == "new");
            CHECK(entries(dir) == 2);  // the record and the old one's second link
            // A durable write is not deferred: it is fsynced anyway.
            write_file_atomic(dir / "durable", "a");
            write_file_atomic(dir / "durable", "b");
            CHECK(entries(dir) == 3);
            CHECK(links(rec) == 1);
        }
        CHECK(entries(dir) == 2);
        CHECK(read_file(rec) == "new");
        // Left by a process killed before its answer: a stale temp of the record.
        {
            AfterAnswer scope;
            write_file_atomic(rec, "newer", 0600, Durability::live);
            CHECK(remove_stale_temps(rec) == 1);
        }
        CHECK(entries(dir) == 2);
        CHECK(read_file(rec) == "newer");
        fs::remove_all(dir);
    }
}
