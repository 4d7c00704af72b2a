#pragma once
// The writer's live position, published in a file it keeps mapped
// (audit/position): one 64-bit sequence number, the same a status request
// answers with (the highest of the written and the durable sequence). A pool
// acquire reads it without a round trip that would wake the writer.

#include <cstdint>
#include <filesystem>
#include <optional>

namespace sandweave::audit {

std::filesystem::path position_path(const std::filesystem::path& dir);

// The writer's side: made whole beside and renamed into place, so a reader
// never sees it short; then mapped for the writer's life.
class PositionPublisher {
  public:
    explicit PositionPublisher(const std::filesystem::path& dir);
    PositionPublisher(const PositionPublisher&) = delete;
    PositionPublisher& operator=(const PositionPublisher&) = delete;
    ~PositionPublisher();
    void publish(std::uint64_t sequence);

  private:
    std::uint64_t* slot_ = nullptr;
};

// The last position the writer in `dir` published. Nullopt when there is
// none to read (a writer of an older sandweave, a file that is not ours):
// ask the writer then. After the writer's death it is the position it last
// published, never later than what it wrote.
std::optional<std::uint64_t> published_position(const std::filesystem::path& dir);

}  // namespace sandweave::audit
