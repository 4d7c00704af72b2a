#pragma once
// How the CLI shows the library's progress reports (lib/core/progress.hpp):
// on a terminal, one line on stderr redrawn in place and erased at the end;
// when stderr is not a terminal, nothing, unless --progress asks for plain
// lines (one per step and per tenth done). Log lines printed meanwhile go
// above the progress line, never through it.

#include <functional>

namespace sandweave::cli {

// Installs the process-wide sink: `forced` is --progress, `quiet` is -q
// (which shows none).
void install_progress(bool forced, bool quiet);

// Runs `write` (which prints a whole line on stderr) with the progress line
// out of the way, and draws it again afterwards.
void with_progress_hidden(const std::function<void()>& write);

}  // namespace sandweave::cli
