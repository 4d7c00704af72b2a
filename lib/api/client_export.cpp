// What a client does on its own side for a remote worker (api.hpp, "a remote
// worker" and "an export written on the client").
//
// An audit export written on the client (see export_to_client in api.hpp).
// The order is what keeps a status truthful: the old sidecar goes first, the
// log lands under its name only after its bytes were checked against the
// worker's count and sha256, and the new sidecar is written last.

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <optional>

#include "lib/api/api.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/progress.hpp"
#include "lib/core/sha256.hpp"
#include "lib/options/template.hpp"

namespace sandweave::api {

CreateParams for_remote_worker(CreateParams p, const std::filesystem::path& client_state_dir) {
    if (p.template_ref && is_template_file(*p.template_ref)) {
        auto resolved =
            TemplateResolver::with_default_paths(client_state_dir).resolve(*p.template_ref);
        p.template_ref = resolved.doc.dump();
        p.template_source = "client:" + std::filesystem::absolute(resolved.name).string();
    }
    return p;
}

TemplateShowParams for_remote_worker(TemplateShowParams p,
                                     const std::filesystem::path& client_state_dir) {
    if (is_template_file(p.template_ref))
        p.template_ref = TemplateResolver::with_default_paths(client_state_dir)
                             .resolve(p.template_ref)
                             .doc.dump();
    return p;
}

TemplateValidateResult validate_on_client(const TemplateValidateParams& p,
                                          const std::filesystem::path& client_state_dir) {
    auto t = TemplateResolver::with_default_paths(client_state_dir).validate_file(p.file);
    return TemplateValidateResult{true, p.file, t.chain};
}

audit::Status export_to_client(Api& api, const std::string& id, const std::string& path_text,
                               const std::string& via) {
    if (path_text.empty()) throw Error(ErrorCode::usage, "path: empty");
    namespace fs = std::filesystem;
    fs::path path = fs::absolute(path_text);
    fs::path sidecar = path.string() + ".status.json";
    std::error_code ec;
    if (fs::is_directory(path, ec))
        throw Error(ErrorCode::general, "audit export to " + path.string() + ": is a directory");
    // A sidecar that stays behind must never describe an export we did not make.
    if (fs::remove(sidecar, ec); ec)
        throw Error(ErrorCode::general, "audit export: cannot remove the old " + sidecar.string() +
                                            ": " + ec.message());
    // What an export killed before (SIGKILL: no chance to unlink) left here.
    remove_stale_temps(path);
    remove_stale_temps(sidecar);
    TempFile out = with_context("audit export", [&] { return create_temp_beside(path, 0600); });
    const fs::path& tmp = out.path;
    Fd& fd = out.fd;
    struct Discard {
        fs::path p;
        bool keep = false;
        ~Discard() {
            std::error_code e;
            if (!keep) fs::remove(p, e);
        }
    } discard{tmp};

    Sha256 md;
    std::uint64_t received = 0;
    // The size is known only at the end: progress once it is worth showing.
    std::optional<Progress> progress;
    audit::Status st = api.audit_fetch(IdParams{id}, [&](std::string_view chunk) {
        md.update(chunk);
        received += chunk.size();
        if (!progress && received >= (16u << 20))
            progress.emplace("fetching audit log from " + via, ProgressUnit::bytes);
        if (progress) progress->set(received);
        while (!chunk.empty()) {
            ssize_t w = ::write(fd.get(), chunk.data(), chunk.size());
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) throw_errno("audit export: write " + tmp.string());
            chunk.remove_prefix(static_cast<std::size_t>(w));
        }
    });
    std::string got = md.hex_digest();
    if (received != st.bytes || got != st.sha256)
        throw Error(ErrorCode::general, "audit export via " + via + ": received " +
                                            std::to_string(received) + " bytes (sha256 " + got +
                                            "), but the worker exported " +
                                            std::to_string(st.bytes) + " bytes (sha256 " +
                                            st.sha256 + "); nothing was written");
    if (::fsync(fd.get()) != 0) throw_errno("audit export: fsync " + tmp.string());
    fs::rename(tmp, path, ec);
    if (ec)
        throw Error(ErrorCode::general,
                    "audit export: rename to " + path.string() + ": " + ec.message());
    discard.keep = true;
    // Closed only now: its lock kept remove_stale_temps away until the rename.
    if (::close(fd.release()) != 0) throw_errno("audit export: close " + path.string());
    fsync_dir(path.parent_path());

    st.path = path.string();
    nlohmann::json doc = audit::to_json(st);
    doc["via"] = via;
    write_file_atomic(sidecar, doc.dump(2) + "\n", 0600);
    return st;
}

}  // namespace sandweave::api
