// libFuzzer target: template and option resolution (lib/options), as `create
// --template` and `template show` drive it, down to the limits the bundle
// gets (lib/runtime/limits.hpp).
//
// Input: one flags byte, then up to five documents separated by NUL bytes.
// The first is the template reference: inline JSON/YAML text, or a template
// name. The others are user templates t1.yaml ... t4.yaml in a scratch
// directory searched before the built-ins (templates/), so `extends` chains
// run through user files (by name or by ./path), built-ins and inline text.
// Properties (templates, docs/guide.md "Templates"):
//   - nothing crashes; resolution throws nothing but sandweave::Error;
//   - a resolved template has an image, a chain without repeats and at most
//     32 long, starting with the reference's own name, and every origin names
//     a template on the chain and a leaf present in the document;
//   - resolve_spec gives a spec whose JSON round-trips unchanged;
//   - the host cgroup is never smaller than the guest's limits.
// Seeds: tests/data/templates/corpus; tokens: tests/data/templates/template.dict.

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/core/error.hpp"
#include "lib/options/options.hpp"
#include "lib/options/template.hpp"
#include "lib/runtime/limits.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace sandweave;

void require(bool ok) {
    if (!ok) std::abort();
}

const fs::path& scratch_dir() {
    static const fs::path dir = [] {
        fs::path d =
            fs::temp_directory_path() / ("sandweave-fuzz-template-" + std::to_string(::getpid()));
        fs::create_directories(d);
        return d;
    }();
    return dir;
}

std::vector<std::string> split_documents(std::string_view in, std::size_t most) {
    std::vector<std::string> out;
    while (out.size() + 1 < most) {
        auto nul = in.find('\0');
        if (nul == std::string_view::npos) break;
        out.emplace_back(in.substr(0, nul));
        in.remove_prefix(nul + 1);
    }
    out.emplace_back(in);
    return out;
}

FlagOverrides flags_from(std::uint8_t b) {
    FlagOverrides f;
    if (b & 0x04) f.hidepid = b & 0x03;  // 3 too: a bad value must be refused, not crash
    if (b & 0x08) f.audit = (b & 0x10) != 0;
    if (b & 0x20) f.user = UserSpec{b, b};
    if (b & 0x40) f.labels["fuzz"] = "1";
    return f;
}

// A name a user could type; anything else (a path) is not looked up, so the
// fuzzer never reads host files through the first document.
bool plain_name(const std::string& s) {
    return !s.empty() && s.size() <= 32 && std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    });
}

void check_resolved(const ResolvedTemplate& t) {
    require(t.doc.is_object() && t.doc.contains("image") && !t.doc.contains("extends"));
    require(!t.chain.empty() && t.chain.size() <= 32 && t.chain.front() == t.name);
    std::set<std::string> seen(t.chain.begin(), t.chain.end());
    require(seen.size() == t.chain.size());
    for (const auto& [ptr, from] : t.origin) {
        require(seen.count(from) == 1);
        json::json_pointer p(ptr);
        require(t.doc.contains(p));
    }
}

void check_spec(const SandboxSpec& spec) {
    json j = to_json(spec);
    require(to_json(spec_from_json(j)) == j);
    const Resources& r = spec.resources;
    json host = host_resources(r);
    if (r.memory) require(host["memory"]["limit"].get<std::uint64_t>() >= *r.memory);
    if (r.pids) require(host["pids"]["limit"].get<std::int64_t>() >= *r.pids);
    if (r.cpus) require(host["cpu"]["quota"].get<std::int64_t>() > 0);
    auto ann = guest_limit_annotations(r);
    require(ann.count(guest_pids_annotation) == (r.pids ? 1u : 0u));
    require(ann.count(guest_memory_annotation) == (r.memory ? 1u : 0u));
    try {
        check_limits_enforceable(r, 2);
    } catch (const Error& e) {
        require(e.code() == ErrorCode::runtime);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const FlagOverrides flags = flags_from(data[0]);
    auto docs =
        split_documents(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1), 5);

    const fs::path& dir = scratch_dir();
    for (int i = 1; i <= 4; ++i) {
        fs::path file = dir / ("t" + std::to_string(i) + ".yaml");
        if (static_cast<std::size_t>(i) < docs.size()) {
            std::ofstream(file, std::ios::binary | std::ios::trunc) << docs[i];
        } else {
            std::error_code ec;
            fs::remove(file, ec);
        }
    }
    const std::string& ref = docs[0];
    if (!is_inline_template(ref) && !plain_name(ref)) return 0;

    TemplateResolver resolver({dir}, {SANDWEAVE_FUZZ_TEMPLATES});
    ResolvedTemplate t;
    try {
        t = resolver.resolve(ref);
    } catch (const Error& e) {
        require(e.code() == ErrorCode::usage || e.code() == ErrorCode::not_found);
        require(std::string_view(e.what()).find('\n') == std::string_view::npos);
        return 0;
    }
    check_resolved(t);
    try {
        check_spec(resolve_spec(t, nullptr, "", flags));
    } catch (const Error& e) {
        require(e.code() == ErrorCode::usage);
    }
    return 0;
}
