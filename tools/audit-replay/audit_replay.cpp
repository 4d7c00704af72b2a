// sandweave-audit-replay: plays the sentry's side of the remote-sink protocol
// (handshake, then header+payload messages) into a writer's sink socket as
// fast as the socket takes them, to measure the writer and to build big logs.
//
//   sandweave-audit-replay --socket S --corpus DIR [--count N] [--dropped-base K]
//   sandweave-audit-replay --socket S --trace FILE [--count N] [--batch B]
//   sandweave-audit-replay --record S --trace FILE [--corpus DIR]
//
// --record plays the monitor instead: listens at S (point runsc's remote sink
// there), answers the handshake and stores every message until the sandbox
// closes the connection: into the trace FILE and, one file per message type
// (first two seen), into the corpus DIR (the fuzzer's seeds).
//
// A corpus directory holds one recorded message (header included) per file;
// a trace FILE holds records as {u32 little-endian length, message bytes}.
// Messages are sent round-robin until N were sent (default: each once). Like
// the sentry it never waits for the writer: with --no-block it counts EAGAIN
// as drops and puts the cumulative count into later headers. --batch B sends B
// points per message the way runtime/audit-sink.patch does (type 0x7f01);
// N still counts points. --rate R paces the sending to R points per second
// (a guest's rate; default: as fast as the socket takes them).

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "lib/audit/wire.hpp"
#include "lib/core/fsutil.hpp"

namespace fs = std::filesystem;

namespace {

int record(const std::string& path, const std::string& trace, const std::string& corpus) {
    int lfd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    ::unlink(path.c_str());
    if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(lfd, 1) != 0) {
        std::perror("bind/listen");
        return 1;
    }
    std::printf("listening\n");
    std::fflush(stdout);
    int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
        std::perror("accept");
        return 1;
    }
    std::string buf(1 << 20, '\0');
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) return 1;
    if (!corpus.empty()) {
        fs::create_directories(corpus);
        FILE* h = std::fopen((fs::path(corpus) / "handshake.bin").c_str(), "wb");
        std::fwrite(buf.data(), 1, static_cast<std::size_t>(n), h);
        std::fclose(h);
    }
    std::string hello = sandweave::audit::encode_handshake();
    ::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
    FILE* out = std::fopen(trace.c_str(), "wb");
    std::map<std::uint16_t, int> per_type;
    std::uint64_t count = 0;
    for (;;) {
        n = ::recv(fd, buf.data(), buf.size(), 0);
        if (n <= 0) break;
        std::uint32_t len = static_cast<std::uint32_t>(n);
        std::fwrite(&len, 4, 1, out);
        std::fwrite(buf.data(), 1, len, out);
        ++count;
        if (!corpus.empty() && n >= 4) {
            std::uint16_t type;
            std::memcpy(&type, buf.data() + 2, 2);
            if (per_type[type]++ < 2) {
                auto name = fs::path(corpus) / ("type" + std::to_string(type) + "-" +
                                                std::to_string(per_type[type]) + ".bin");
                FILE* h = std::fopen(name.c_str(), "wb");
                std::fwrite(buf.data(), 1, len, h);
                std::fclose(h);
            }
        }
    }
    std::fclose(out);
    std::printf("{\"recorded\":%llu}\n", static_cast<unsigned long long>(count));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::string socket_path, corpus, trace, record_path;
    std::uint64_t count = 0;
    bool no_block = false;
    std::size_t batch = 1;
    double rate = 0;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
        if (a == "--socket")
            socket_path = next();
        else if (a == "--corpus")
            corpus = next();
        else if (a == "--trace")
            trace = next();
        else if (a == "--count")
            count = std::stoull(next());
        else if (a == "--rate")
            rate = std::stod(next());
        else if (a == "--batch")
            batch = std::max<std::size_t>(1, std::stoull(next()));
        else if (a == "--no-block")
            no_block = true;
        else if (a == "--record")
            record_path = next();
        else {
            std::fprintf(stderr, "unknown argument %s\n", a.c_str());
            return 2;
        }
    }
    if (!record_path.empty()) return record(record_path, trace, corpus);
    std::vector<std::string> msgs;
    try {
        if (!corpus.empty()) {
            std::vector<fs::path> files;
            for (const auto& e : fs::directory_iterator(corpus))
                if (e.is_regular_file()) files.push_back(e.path());
            std::sort(files.begin(), files.end());
            for (const auto& f : files) {
                std::string m = sandweave::read_file(f);
                // Skip files that are not framed messages (the handshake seed).
                if (m.size() >= 8) msgs.push_back(std::move(m));
            }
        }
        if (!trace.empty()) {
            std::string t = sandweave::read_file(trace, 1ull << 32);
            std::size_t p = 0;
            while (p + 4 <= t.size()) {
                std::uint32_t len;
                std::memcpy(&len, t.data() + p, 4);
                p += 4;
                if (p + len > t.size()) break;
                msgs.push_back(t.substr(p, len));
                p += len;
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    if (msgs.empty() || socket_path.empty()) {
        std::fprintf(stderr, "usage: %s --socket S (--corpus DIR | --trace FILE) [--count N]\n",
                     argv[0]);
        return 2;
    }
    if (count == 0) count = msgs.size();
    // Points per message: 1, or the batches built from the messages in order.
    std::vector<std::uint64_t> points(msgs.size(), 1);
    if (batch > 1) {
        std::vector<std::string> batches;
        points.clear();
        for (std::size_t i = 0; i < msgs.size(); i += batch) {
            std::vector<std::pair<std::uint16_t, std::string>> entries;
            for (std::size_t k = i; k < std::min(msgs.size(), i + batch); ++k) {
                sandweave::audit::WireHeader h;
                std::string_view body;
                if (sandweave::audit::parse_header(msgs[k], h, body) !=
                    sandweave::audit::HeaderError::none)
                    continue;
                entries.emplace_back(h.message_type, std::string(body));
            }
            if (entries.empty()) continue;
            points.push_back(entries.size());
            batches.push_back(sandweave::audit::frame_batch(entries));
        }
        msgs = std::move(batches);
    }

    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_path.c_str(), sizeof addr.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        std::perror("connect");
        return 1;
    }
    std::string hello = sandweave::audit::encode_handshake();
    if (::send(fd, hello.data(), hello.size(), 0) < 0) {
        std::perror("send handshake");
        return 1;
    }
    char reply[64];
    if (::recv(fd, reply, sizeof reply, 0) <= 0) {
        std::fprintf(stderr, "no handshake reply\n");
        return 1;
    }
    std::uint32_t dropped = 0;
    std::uint64_t sent = 0;
    auto start = std::chrono::steady_clock::now();
    for (std::uint64_t i = 0, done = 0; done < count; ++i) {
        std::string& m = msgs[i % msgs.size()];
        if (rate > 0)
            std::this_thread::sleep_until(
                start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(static_cast<double>(done) / rate)));
        done += points[i % msgs.size()];
        std::memcpy(m.data() + 4, &dropped, 4);  // the header's cumulative dropped count
        for (;;) {
            ssize_t n = ::send(fd, m.data(), m.size(), no_block ? MSG_DONTWAIT : 0);
            if (n >= 0) {
                sent += points[i % msgs.size()];
                break;
            }
            if (no_block && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                dropped += static_cast<std::uint32_t>(points[i % msgs.size()]);
                break;
            }
            if (errno == EINTR) continue;
            std::perror("send");
            return 1;
        }
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("{\"sent\":%llu,\"dropped\":%u,\"seconds\":%.3f,\"rate\":%.0f}\n",
                static_cast<unsigned long long>(sent), dropped, secs,
                static_cast<double>(sent) / secs);
    ::close(fd);
    return 0;
}
