// Incremental detokenization for streamed generation: token bytes go in one id at a time and only
// well-formed UTF-8 comes out. A multi-byte character split across tokens is held back until it
// is complete; bytes that can never become valid UTF-8 come out as U+FFFD (one per byte), so the
// output is always valid UTF-8 (gRPC string fields require it).
#ifndef STEPSERVE_ENGINE_TOKENIZER_STREAMING_DECODER_H_
#define STEPSERVE_ENGINE_TOKENIZER_STREAMING_DECODER_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/tokenizer/tokenizer.h"

namespace stepserve::tokenizer {

class StreamingDecoder {
 public:
  // `tokenizer` must outlive the decoder. With `skip_special`, CONTROL tokens produce no text.
  StreamingDecoder(const Tokenizer& tokenizer, bool skip_special)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}

  // Adds one token; returns the text that became complete (possibly empty). An invalid id yields
  // U+FFFD.
  std::string Push(int32_t id);
  // Ends the stream: returns U+FFFD if an incomplete character is pending, else "". The decoder
  // can then be reused.
  std::string Flush();
  // Bytes held back, waiting for the rest of a character.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

// Moves the longest well-formed prefix of *pending to *out, replacing each byte that cannot start
// or continue a valid sequence with U+FFFD; keeps in *pending only a trailing incomplete (but so
// far valid) sequence. Exposed for tests.
void DrainCompleteUtf8(std::string* pending, std::string* out);

}  // namespace stepserve::tokenizer

#endif  // STEPSERVE_ENGINE_TOKENIZER_STREAMING_DECODER_H_
