// The reader->writer queue: bounded, never blocks the producer, keeps order across wraps.

#include <doctest/doctest.h>

#include <string>
#include <thread>

#include "lib/audit/queue.hpp"

using sandweave::audit::ByteQueue;

TEST_CASE("audit queue: bounded by its capacity, push fails instead of blocking") {
    ByteQueue q(1 << 12);
    std::string m(100, 'x');
    int pushed = 0;
    while (q.push(1, 0, m)) ++pushed;
    CHECK(pushed == (1 << 12) / ByteQueue::footprint(100));
    CHECK(q.used() <= q.capacity());
    ByteQueue::Entry e;
    REQUIRE(q.peek(e));
    q.pop(e);
    CHECK(q.push(1, 0, m));                             // room again
    CHECK_FALSE(q.push(1, 0, std::string(3000, 'y')));  // larger than half: never fits
}

TEST_CASE("audit queue: order and contents survive wrap-around") {
    ByteQueue q(1 << 10);
    std::uint64_t next_in = 0, next_out = 0;
    for (int round = 0; round < 1000; ++round) {
        for (int k = 0; k < 3; ++k) {
            std::string m(static_cast<std::size_t>((next_in * 37) % 200),
                          static_cast<char>('a' + next_in % 26));
            if (q.push(2, next_in, m)) ++next_in;
        }
        ByteQueue::Entry e;
        while (q.peek(e)) {
            REQUIRE(e.arg == next_out);
            CHECK(e.kind == 2);
            CHECK(e.data.size() == (next_out * 37) % 200);
            if (!e.data.empty()) CHECK(e.data[0] == static_cast<char>('a' + next_out % 26));
            q.pop(e);
            ++next_out;
        }
    }
    CHECK(next_out == next_in);
    CHECK(next_in > 2000);
}

TEST_CASE("audit queue: a sleeping consumer is woken by a push from another thread") {
    ByteQueue q(1 << 16);
    std::uint64_t sum = 0;
    std::thread consumer([&] {
        std::uint64_t got = 0;
        while (got < 100000) {
            ByteQueue::Entry e;
            if (!q.peek(e)) {
                q.wait(std::chrono::milliseconds(1000));
                continue;
            }
            sum += e.arg;
            q.pop(e);
            ++got;
        }
    });
    for (std::uint64_t i = 1; i <= 100000;)
        if (q.push(1, i, "payload")) ++i;
    consumer.join();
    CHECK(sum == 100000ull * 100001 / 2);
}

TEST_CASE("audit queue: releasing the free part's pages keeps every entry not yet consumed") {
    // Several pages of ring, so that whole free pages exist on both sides of
    // the wrap point; entries that span page boundaries, checked byte for byte.
    ByteQueue q(1 << 16);
    std::uint64_t next_in = 0, next_out = 0;
    auto payload = [](std::uint64_t i) {
        std::string m(static_cast<std::size_t>(500 + (i * 997) % 6000), '\0');
        for (std::size_t k = 0; k < m.size(); ++k) m[k] = static_cast<char>('a' + (i + k) % 26);
        return m;
    };
    for (int round = 0; round < 300; ++round) {
        while (q.push(3, next_in, payload(next_in))) ++next_in;
        // Consume part of what is queued, release the free pages, then check
        // the rest and keep going round the ring.
        ByteQueue::Entry e;
        for (int k = 0; k < 5 && q.peek(e); ++k) {
            REQUIRE(e.arg == next_out);
            CHECK(e.data == payload(next_out));
            q.pop(e);
            ++next_out;
        }
        q.release_free();
        while (q.peek(e)) {
            REQUIRE(e.arg == next_out);
            REQUIRE(e.data == payload(next_out));
            q.pop(e);
            ++next_out;
            if (next_out % 3 == 0) q.release_free();  // an empty ring and a busy one
        }
    }
    CHECK(next_out == next_in);
    CHECK(next_in > 1000);
}

TEST_CASE("audit queue: a push into an empty ring past its first quarter starts at its beginning") {
    // A consumer that keeps up then keeps the producer within the first
    // quarter of the ring (and an entry) instead of going round all of it.
    ByteQueue q(1 << 12);
    const std::size_t quarter = (1 << 12) / 4;
    REQUIRE(q.push(1, 0, "first"));
    ByteQueue::Entry e;
    REQUIRE(q.peek(e));
    const char* start = e.data.data();
    q.pop(e);
    std::size_t restarts = 0;
    const char* last = start;
    for (std::uint64_t i = 1; i < 300; ++i) {
        REQUIRE(q.push(1, i, std::string(100, 'x')));
        if (i % 3 != 0) REQUIRE(q.push(1, i + 1000, "second"));  // not empty: appended
        REQUIRE(q.peek(e));
        CHECK(e.arg == i);
        CHECK(e.data == std::string(100, 'x'));
        CHECK(static_cast<std::size_t>(e.data.data() - start) < quarter + 256);
        if (e.data.data() == start) ++restarts;
        CHECK((e.data.data() > last || e.data.data() == start));
        last = e.data.data();
        q.pop(e);
        if (i % 3 != 0) {
            REQUIRE(q.peek(e));
            CHECK(e.arg == i + 1000);
            CHECK(e.data == "second");
            CHECK(e.data.data() > last);
            q.pop(e);
        }
        CHECK_FALSE(q.peek(e));
        CHECK(q.used() == 0);
        // Three quarters skipped at most: a quarter is always free.
        CHECK(q.push(1, 0, std::string(quarter - 64, 'q')));
        REQUIRE(q.peek(e));
        q.pop(e);
    }
    CHECK(restarts > 10);
}

TEST_CASE("audit queue: an empty ring takes an entry of up to half of it wherever it stands") {
    // The restart at the beginning must not make a large entry fail to fit
    // in an empty ring: at 0.3 of the ring, skipping the rest (0.7) and an
    // entry of 0.45 are too much together, so the entry goes in place.
    const std::size_t cap = 1 << 12;
    for (std::size_t lead : {cap * 3 / 10, cap * 2 / 5, cap / 2 - 64}) {
        ByteQueue q(cap);
        ByteQueue::Entry e;
        REQUIRE(q.push(1, 0, std::string(lead, 'a')));  // moves the position on
        REQUIRE(q.peek(e));
        q.pop(e);
        const std::string big(cap * 9 / 20, 'b');
        CHECK(q.push(2, lead, big));
        REQUIRE(q.peek(e));
        CHECK(e.arg == lead);
        CHECK(e.data == big);
        q.pop(e);
        CHECK(q.used() == 0);
    }
}
