// The token reader: any file, as u16 and as u32 tokens, for a graph that
// shifts labels itself and one that takes targets; a file that opens gives
// micro-batches.
#include "fuzz/fuzz_file.h"
#include "runtime/io/token_data.h"

using namespace mt::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mt::fuzz::MemFile file(data, size);
  for (TokenType type : {TokenType::U16, TokenType::U32})
    for (TargetKind kind : {TargetKind::Labels, TargetKind::Targets}) {
      TokenData tokens;
      if (!TokenData::open(file.path(), type, /*vocab=*/300, /*batch=*/2,
                           /*seq=*/3, kind, tokens))
        continue;
      TokenBatch batch;
      for (int i = 0; i < 4; ++i)
        tokens.next(batch);
      tokens.seek(tokens.size() / 2);
      tokens.next(batch);
    }
  return 0;
}
