// The cluster file the controller reads (lib/controller/controller.hpp).
#include <sys/stat.h>

#include <fstream>

#include "lib/controller/controller.hpp"
#include "lib/controller/slurm_json.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"

namespace sandweave::controller {

ClusterConfig read_cluster_env(const std::filesystem::path& file) {
    std::ifstream in(file);
    if (!in) throw Error(ErrorCode::usage, "cannot read the cluster file " + file.string());
    ClusterConfig c;
    std::string line;
    const std::string state_prefix = "SANDWEAVE_WEAVE_STATE_";
    const std::string socket_prefix = "SANDWEAVE_WEAVE_SOCKET_";
    while (std::getline(in, line)) {
        if (line.rfind("export ", 0) == 0) line = line.substr(7);
        auto eq = line.find('=');
        if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
        std::string key = line.substr(0, eq), value = line.substr(eq + 1);
        if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
            value.back() == value.front())
            value = value.substr(1, value.size() - 2);
        if (key == "SLURM_CONF") c.slurm_conf = value;
        if (key == "SANDWEAVE_WEAVE_PARTITION") c.partition = value;
        if (key == "SANDWEAVE_WEAVE_SNAPSHOTS") c.snapshots = value;
        if (key == "SANDWEAVE_WEAVE_MUNGE_SOCKET") c.munge_socket = value;
        if (key.rfind(state_prefix, 0) == 0) c.state_dirs[key.substr(state_prefix.size())] = value;
        if (key.rfind(socket_prefix, 0) == 0) c.sockets[key.substr(socket_prefix.size())] = value;
    }
    return c;
}

std::string controller_id(const std::filesystem::path& state_dir) {
    make_dirs(state_dir, 0700);
    ::chmod(state_dir.c_str(), 0700);
    const auto file = state_dir / "id";
    if (!std::filesystem::exists(file)) write_file_atomic(file, random_hex(12) + "\n", 0644);
    std::string id = read_file(file, 256);
    while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
    if (!slurm::valid_controller_id(id))
        throw Error(ErrorCode::usage, "controller: " + file.string() +
                                          " holds no controller id (1 to 32 of a-z and 0-9)");
    return id;
}

std::string worker_socket(const ClusterConfig& c, const std::string& node) {
    auto it = c.sockets.find(node);
    return it == c.sockets.end() ? worker_socket_default : it->second;
}

}  // namespace sandweave::controller
