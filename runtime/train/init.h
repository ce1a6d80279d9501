// Initial values for training from scratch (mtrun --init): deterministic
// in the seed and the parameter's name, independent of thread count and
// machine.
#ifndef MT_RUNTIME_TRAIN_INIT_H
#define MT_RUNTIME_TRAIN_INIT_H

#include <cstdint>
#include <string>

namespace mt::runtime {

/// Fills out[0, n) with normal(0, stddev) values. Element i is a function of
/// (seed, name, i) alone: a counter-based generator (splitmix64) feeds the
/// Box-Muller transform, so any chunking gives the same tensor.
void initNormal(float *out, int64_t n, uint64_t seed, const std::string &name,
                float stddev, int threads);

} // namespace mt::runtime

#endif // MT_RUNTIME_TRAIN_INIT_H
