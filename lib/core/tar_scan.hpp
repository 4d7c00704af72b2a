#pragma once
// A streaming check of a tar archive's member names, for layers of images
// that come from elsewhere (hostile input): fed the archive's bytes in any
// chunks, it finds every member's path and link target (ustar prefix, GNU
// long names, pax path/linkpath) and refuses a member that would leave the
// extraction root (a ".." component in its path or a hard link's target), a
// header whose checksum is wrong, and an archive that ends mid-member. It
// extracts nothing; symlink targets may point anywhere (they resolve inside
// the guest's root).

#include <cstdint>
#include <string>
#include <string_view>

namespace sandweave {

class TarScan {
  public:
    // Returns false once the archive is refused; error() says why.
    bool feed(std::string_view data);
    // At the end of the data: false if the archive was cut short.
    bool finish();
    const std::string& error() const { return error_; }
    std::uint64_t members() const { return members_; }

  private:
    bool header(const unsigned char* h);
    bool member(const std::string& path, char type, const std::string& link);
    bool fail(std::string why);

    std::string buf_;
    std::uint64_t skip_ = 0;     // data bytes (with padding) still to pass over
    std::uint64_t collect_ = 0;  // bytes of a long name or pax header still to read
    char collecting_ = 0;        // 'L', 'K', 'x' while collecting
    std::string collected_;
    std::string long_name_, long_link_, pax_path_, pax_link_;
    std::uint64_t members_ = 0;
    int zero_blocks_ = 0;
    bool ended_ = false;
    std::string error_;
};

}  // namespace sandweave
