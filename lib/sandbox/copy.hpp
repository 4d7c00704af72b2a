#pragma once
// `sandweave cp`, the sandbox's side: the guest agent's copier
// (SW_EXEC_COPY_IN / COPY_OUT, wire/copy.h) sends or receives a copy stream
// over the agent's ordinary command channel, with its flow control, timeouts
// and end report. The guest does its file work itself (no tar, no binary of
// the image), as the requested user (root by default, as docker cp writes).
// What the copier says went wrong becomes the Error's one line.

#include <optional>
#include <string>

#include "lib/core/process.hpp"
#include "lib/options/options.hpp"
#include "lib/sandbox/context.hpp"

namespace sandweave {

struct CopyOutRequest {
    std::string id;
    std::string path;  // absolute, in the guest
    std::optional<UserSpec> user;
};

struct CopyInRequest {
    std::string id;
    std::string path;       // the destination, absolute, in the guest
    std::string name;       // the copy's name when `path` is a directory
    bool contents = false;  // merge the root directory's contents into `path`
    std::optional<UserSpec> user;
};

// The guest path `req.path` as a copy stream to `out`. `control`: cancel
// stops the copier (a failed receiver).
void copy_out_of_sandbox(Context& ctx, const CopyOutRequest& req, const OutputSink& out,
                         RunControl* control, bool forward_own_signals);
// A copy stream read from `stream_fd` until its end, written in the guest.
void copy_into_sandbox(Context& ctx, const CopyInRequest& req, int stream_fd, RunControl* control,
                       bool forward_own_signals);

}  // namespace sandweave
