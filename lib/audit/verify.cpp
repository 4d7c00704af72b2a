// `sandweave audit verify`: a copy of an exported log against its sidecar,
// offline (docs/design.md, "Checking a copy"). One pass over the lines checks,
// in this order for each line: it is whole, it carries a chain that follows
// from the previous line's and its own bytes, it starts the way the writer
// writes records ({"seq":N,"point":"P","dropped":D), seq is the next one, D is
// the loss recorded so far, and an event's point is listed in the sidecar.
// Then the totals: last_sequence, chain, bytes, sha256, events, dropped. The
// sha256 of the whole file is computed on a second thread meanwhile.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <thread>
#include <unordered_set>

#include "lib/audit/audit.hpp"
#include "lib/audit/chain.hpp"
#include "lib/audit/egress_log.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/json_input.hpp"
#include "lib/core/sha256.hpp"

namespace sandweave::audit {

namespace {

// Reads an unsigned decimal at s[pos..], advancing pos; false if none.
bool take_u64(std::string_view s, std::size_t& pos, std::uint64_t& v) {
    auto r = std::from_chars(s.data() + pos, s.data() + s.size(), v);
    if (r.ec != std::errc() || r.ptr == s.data() + pos) return false;
    pos = static_cast<std::size_t>(r.ptr - s.data());
    return true;
}

bool take(std::string_view s, std::size_t& pos, std::string_view lit) {
    if (s.substr(pos, lit.size()) != lit) return false;
    pos += lit.size();
    return true;
}

struct Head {
    std::uint64_t seq = 0, dropped = 0, lost = 0;
    std::string_view point;
};

// {"seq":N,"point":"P","dropped":D[,"lost":L for gap records]
bool parse_head(std::string_view line, Head& h) {
    std::size_t pos = 0;
    if (!take(line, pos, "{\"seq\":") || !take_u64(line, pos, h.seq) ||
        !take(line, pos, ",\"point\":\""))
        return false;
    auto q = line.find('"', pos);
    if (q == std::string_view::npos) return false;
    h.point = line.substr(pos, q - pos);
    pos = q + 1;
    if (!take(line, pos, ",\"dropped\":") || !take_u64(line, pos, h.dropped)) return false;
    if (h.point == "gap" && (!take(line, pos, ",\"lost\":") || !take_u64(line, pos, h.lost)))
        return false;
    return true;
}

// Reasons under which the log stopped before every loss could get a gap
// record: then the gaps may add up to less than `dropped`, never more.
bool losses_after_log_end(const Status& s) {
    for (const char* r : {"byte_limit", "disk_failure", "writer_died", "writer_unresponsive"})
        if (std::find(s.reasons.begin(), s.reasons.end(), r) != s.reasons.end()) return true;
    return false;
}

std::string u(std::uint64_t v) {
    return std::to_string(v);
}

// The sidecar at `side` into `st`; why it cannot vouch for a copy, if so.
std::optional<std::string> read_sidecar(const fs::path& side, Status& st) {
    std::string text;
    try {
        text = read_file(side, 64u << 20);
    } catch (const Error& e) {
        return "no usable sidecar: " + std::string(e.what());
    }
    try {
        st = status_from_json(parse_untrusted_json(text));
    } catch (const std::exception& e) {
        return "sidecar " + side.string() + " is not a status document: " + e.what();
    }
    if (st.error) return "the sidecar records a failed export: " + *st.error;
    if (st.sha256.size() != 64) return std::string("the sidecar carries no sha256");
    ChainValue chain;
    if (!chain_parse(st.chain, chain))
        return std::string(
            "the sidecar carries no chain (exported by a writer without chained records)");
    return std::nullopt;
}

// A whole file mapped read-only (nothing for an empty one).
class Mapping {
  public:
    Mapping(int fd, std::size_t size, const fs::path& path) : size_(size) {
        if (size == 0) return;
        void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) throw_errno("mmap " + path.string());
        data_ = static_cast<const char*>(m);
        ::madvise(m, size, MADV_SEQUENTIAL);
    }
    ~Mapping() {
        if (data_) ::munmap(const_cast<char*>(data_), size_);
    }
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    std::string_view view() const { return {data_ ? data_ : "", size_}; }

  private:
    const char* data_ = nullptr;
    std::size_t size_;
};

// What the lines checked so far add up to.
struct LineTotals {
    std::uint64_t lines = 0, events = 0, recorded_loss = 0, truncated = 0;
    Chain chain;
};

// Each line's checks, in the order the file's comment gives; the first
// discrepancy, if any.
std::optional<std::string> check_lines(std::string_view all, const Status& st, LineTotals& t) {
    std::unordered_set<std::string> points;
    for (const auto& p : st.points) points.insert(p.name);
    std::size_t pos = 0;
    std::string_view last_point;
    while (pos < all.size()) {
        const std::uint64_t n = t.lines + 1;
        auto at = [n] { return "line " + u(n) + ": "; };
        auto nl = all.find('\n', pos);
        if (nl == std::string_view::npos)
            return at() + "not terminated by a newline (the copy is cut off)";
        std::string_view line = all.substr(pos, nl - pos), body, hex;
        ChainValue carried;
        if (!split_chained_line(line, body, hex) || !chain_parse(hex, carried))
            return at() + "carries no chain field (not a record of the writer, or edited)";
        if (t.chain.next(body) != carried)
            return at() +
                   "its chain does not follow from the previous line and its bytes "
                   "(a line was edited, removed or reordered here)";
        t.chain.reset(carried);
        Head h;
        if (!parse_head(line, h)) return at() + "does not start like an audit record";
        if (h.seq != n)
            return at() + "seq " + u(h.seq) + ", expected " + u(n) +
                   " (a line is missing or out of order)";
        if (n > st.last_sequence)
            return at() + "beyond the sidecar's last_sequence " + u(st.last_sequence);
        if (h.point == "gap") {
            t.recorded_loss += h.lost;
        } else if (h.point == "writer/truncated_message") {
            ++t.truncated;
            ++t.recorded_loss;
        } else if (h.point.substr(0, 7) != "writer/") {
            // The host's own records of refusals come only with a policy.
            const bool host_point = h.point == refused_point && st.network.is_object();
            if (h.point != last_point && !host_point && !points.contains(std::string(h.point)))
                return at() + "point " + std::string(h.point) +
                       " is not among the sidecar's points";
            last_point = h.point;
            ++t.events;
        } else if (h.point == "writer/unknown_message" || h.point == "writer/malformed_message") {
            ++t.events;
        }
        if (h.dropped != t.recorded_loss)
            return at() + "dropped " + u(h.dropped) + ", but the gap records so far add up to " +
                   u(t.recorded_loss);
        t.lines = n;
        pos = nl + 1;
    }
    return std::nullopt;
}

// The lines' totals against the sidecar's; the first discrepancy, if any.
std::optional<std::string> check_totals(const LineTotals& t, const Status& st, std::uint64_t bytes,
                                        const std::string& sha) {
    ChainValue want_chain;
    chain_parse(st.chain, want_chain);  // read_sidecar checked it
    if (t.lines != st.last_sequence)
        return "the copy ends at line " + u(t.lines) + ", the sidecar's last_sequence is " +
               u(st.last_sequence) + " (lines were cut off)";
    if (t.chain.value() != want_chain)
        return "the last line's chain " + chain_hex(t.chain.value()) + " is not the sidecar's " +
               st.chain;
    if (bytes != st.bytes)
        return "the copy has " + u(bytes) + " bytes, the sidecar says " + u(st.bytes);
    if (sha != st.sha256) return "sha256 " + sha + " is not the sidecar's " + st.sha256;
    if (t.events != st.events)
        return "the copy has " + u(t.events) + " events, the sidecar says " + u(st.events);
    if (t.recorded_loss > st.dropped || (t.recorded_loss < st.dropped && !losses_after_log_end(st)))
        return "the gap records add up to " + u(t.recorded_loss) +
               " lost, the sidecar's dropped is " + u(st.dropped);
    return std::nullopt;
}

}  // namespace

VerifyResult verify_log(const fs::path& log, const std::optional<fs::path>& sidecar_path) {
    VerifyResult r;
    const fs::path side = sidecar_path ? *sidecar_path : fs::path(log.string() + ".status.json");
    auto fail = [&](std::string what) {
        r.ok = false;
        r.discrepancy = std::move(what);
        return r;
    };
    // The copy first: one that cannot be read at all is an error, not a verdict.
    Fd fd(::open(log.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw_errno("open " + log.string());
    struct stat sb;
    if (::fstat(fd.get(), &sb) != 0) throw_errno("stat " + log.string());
    if (!S_ISREG(sb.st_mode)) throw Error(ErrorCode::usage, log.string() + " is not a file");
    if (auto why = read_sidecar(side, r.sidecar)) return fail(*why);

    r.bytes = static_cast<std::size_t>(sb.st_size);
    Mapping mapping(fd.get(), r.bytes, log);
    const std::string_view all = mapping.view();
    // The hash of the whole file on a second thread, beside the line checks.
    std::string sha;
    std::jthread hasher([&] { sha = sha256_hex(all); });

    LineTotals t;
    auto line_problem = check_lines(all, r.sidecar, t);
    r.lines = t.lines;
    r.events = t.events;
    if (line_problem) return fail(*line_problem);
    r.gap_lost = t.recorded_loss - t.truncated;
    hasher.join();
    if (auto why = check_totals(t, r.sidecar, r.bytes, sha)) return fail(*why);
    r.ok = true;
    return r;
}

}  // namespace sandweave::audit
